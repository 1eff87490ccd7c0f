"""What a human asks of compensations (docs/compensation.md): request one or a run's (a
saga), and decide them; an approved compensation is put on the broker for a worker
(``reconcile.compensation_runs``)."""

from __future__ import annotations

from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction
from django.utils.translation import gettext_noop

from ledger import records
from ledger.calls import entries
from ledger.calls.values import Caller
from ledger.domain import DataClassification, Decision, ObservationCode, RecordState
from ledger.errors import ApprovalError, InvalidInput, InvalidTransition
from ledger.models import (
    ApprovalRequest,
    AuditEvent,
    Compensation,
    IdempotencyRecord,
    LedgerEntry,
    Run,
)
from ledger.redaction import redact_text
from ledger.services import approvals
from ledger.services.audit import audit
from ledger.services.compensations import compensation_record
from ledger.stored_text import StoredText
from reconcile.compensations import (
    Preview,
    compensation_run,
    first_entry,
    open_approvals,
    preview,
    saga_compensations,
    saga_plan,
    waiting_approvals,
)
from reconcile.operator_actions import request_lookup
from reconcile.tasks import send_compensations, send_saga

# The compensation events' details (shown translated, the original call's key filled in).
_COMPENSATE = StoredText(gettext_noop("compensate %(key)s"))
_ASKED_AGAIN = StoredText(gettext_noop("compensate %(key)s: asked again"))
_AGAIN = StoredText(gettext_noop("compensate %(key)s again: it did not run"))
#: The longest requester's reason kept (a longer one is cut, and says so).
REASON_MAX = 500


def request_compensation(
    *,
    record: IdempotencyRecord,
    actor: str,
    requester_id: int | None,
    source: str,
    reason: str = "",
) -> Compensation:
    """Ask for the compensation of ``record``: its own record, entry and approval request,
    with the requester's ``reason`` (optional; kept redacted, for the approver). Asking again
    creates nothing; it moves the existing compensation on if it is stuck (a look-up for an
    unknown one, a new approval request for one known not to have run)."""
    existing = Compensation.objects.filter(original=record).first()
    if existing is not None:
        _move_on(existing, actor=actor, requester_id=requester_id, source=source)
        return existing
    planned = preview(record=record)
    first = first_entry(record)
    with transaction.atomic():
        # One request at a time per original: the second waits here, then finds the first's.
        IdempotencyRecord.objects.select_for_update().filter(pk=record.pk).first()
        existing = Compensation.objects.filter(original=record).first()
        if existing is not None:
            return existing
        tool = planned.tool
        call = _compensating_call(planned, first, actor=actor, source=source)
        reservation = records.reserve_key(
            tenant=record.tenant,
            tool=tool,
            key=planned.key,
            fingerprint=call.input_hash,
            replay_policy=call.classification.replay_policy,
            data_classification=call.data_classification,
            lease_owner=actor,
            actor=actor,
            source=source,
            requires_approval=True,
            run=call.run,
            combination=None,
        )
        if not reservation.created:
            raise InvalidTransition(f"the key {planned.key} is already used by another action")
        comp_record = reservation.record
        entry = _waiting_entry(call, comp_record, again=False)
        compensation = Compensation.objects.create(
            tenant_id=record.tenant_id,
            original=record,
            key=planned.key,
            tool=tool,
            arguments=planned.arguments,
            url=planned.url,
            run=first.run,
            requested_by=actor,
            reason=redact_text(reason.strip(), limit=REASON_MAX),
        )
        audit(
            tenant=record.tenant_id,
            actor=actor,
            action="compensation.requested",
            target=record,
            source=source,
            after=planned.as_dict(),
            detail=compensation.reason,
        )
        approvals.request_approval(
            record=comp_record,
            entry=entry,
            requested_by=actor,
            requester_id=requester_id,
            detail=_COMPENSATE(key=record.key),
        )
    return compensation


STEP_ID_MAX = LedgerEntry._meta.get_field("step_id").max_length


def _compensating_call(
    planned: Preview, first: LedgerEntry, *, actor: str, source: str
) -> entries.NewCall:
    """The compensating call of ``planned``, in the compensation run of the original's
    (``first`` is the original's first entry), with the original action's classification."""
    original = planned.original
    return entries.compensating_call(
        tenant=original.tenant,
        run=compensation_run(first.run, actor=actor, source=source),
        tool=planned.tool,
        step_id=f"compensate:{first.step_id}"[:STEP_ID_MAX],
        arguments=planned.arguments,
        key=planned.key,
        data_classification=DataClassification(original.data_classification),
    )


def _waiting_entry(call: entries.NewCall, record: IdempotencyRecord, *, again: bool) -> LedgerEntry:
    """The compensation's entry, waiting for a human's approval (``again``: a new request for
    a compensation known not to have run)."""
    add = entries.add_retry if again else entries.add
    return add(
        call,
        decision=Decision.APPROVAL_REQUIRED,
        record=record,
        code=ObservationCode.APPROVAL_REQUIRED.value,
    )


def _move_on(
    compensation: Compensation,
    *,
    actor: str,
    requester_id: int | None,
    source: str,
    send: bool = True,
) -> None:
    """A repeated request: never a second execution; at most a look-up, a lost message sent
    again (unless not ``send``: a saga sends its own), or a new approval request (for one whose
    request lapsed, or one known not to have run)."""
    record = compensation_record(compensation)
    if record is None:
        return
    state = RecordState(record.state)
    approval = approvals.open_approval(record)
    if approval is not None:  # whoever asks again is one more principal: never its approver
        approvals.join(approval, requester_id, actor, source=source)
    if state is RecordState.UNKNOWN:
        request_lookup(record=record, actor=actor)
    elif state is RecordState.RESERVED:
        if approval is None:  # its request expired, was rejected or voided: ask a human again
            entry = LedgerEntry.objects.select_related("tool").filter(record=record).latest("pk")
            approvals.request_approval(
                record=record,
                entry=entry,
                requested_by=actor,
                requester_id=requester_id,
                detail=_ASKED_AGAIN(key=compensation.original.key),
            )
        elif approval.state == ApprovalRequest.State.APPROVED and send:
            send_compensations([compensation.pk])
    elif record.failed_retryably and approval is None:
        latest = (
            LedgerEntry.objects.select_related("tenant", "tool", "run", "combination")
            .filter(record=record)
            .latest("pk")
        )
        # Asked again by a human, as the first request was: no token calls it.
        call = entries.retry_of(latest, Caller(latest.tenant, None))
        with transaction.atomic():
            entry = _waiting_entry(call, record, again=True)
            approvals.request_approval(
                record=record,
                entry=entry,
                requested_by=actor,
                requester_id=requester_id,
                detail=_AGAIN(key=compensation.original.key),
            )


def _decide(
    compensations: list[Compensation],
    *,
    user: AbstractBaseUser,
    approve: bool,
    reason: str,
    source: str,
) -> int:
    """Approve or reject the pending compensations with one reason (required either way: it
    is the audit trail's why). The approvals rule decides who may (``approvals.decide``), for
    every one of them before any is decided. Returns how many were decided."""
    waiting = waiting_approvals(compensations)
    if not waiting:
        raise ApprovalError("no compensation here waits for a decision")
    if not reason.strip() and (missing := approvals.reason_needed(waiting[0], approve=approve)):
        raise InvalidInput(missing)
    for approval in waiting:
        if approvals.refusal_of_decider(approval, user) is not None:
            # decide() refuses it, audits the refusal and raises; nothing else is decided.
            approvals.decide(
                approval=approval, user=user, approve=approve, reason=reason, source=source
            )
    for approval in waiting:
        approvals.decide(
            approval=approval, user=user, approve=approve, reason=reason, source=source
        )
    return len(waiting)


def decide_compensation(
    *,
    compensation: Compensation,
    user: AbstractBaseUser,
    approve: bool,
    reason: str,
    source: str = AuditEvent.Source.CONSOLE,
) -> None:
    """A human's decision on one compensation; once approved, a worker runs it."""
    _decide([compensation], user=user, approve=approve, reason=reason, source=source)
    if approve:
        transaction.on_commit(lambda: send_compensations([compensation.pk]))


def decide_saga(
    *,
    run: Run,
    user: AbstractBaseUser,
    approve: bool,
    reason: str,
    source: str = AuditEvent.Source.CONSOLE,
) -> int:
    """A human's decision on every pending compensation of a run at once; once approved, a
    worker runs the saga. Returns how many were decided."""
    decided = _decide(
        saga_compensations(run), user=user, approve=approve, reason=reason, source=source
    )
    if approve:
        transaction.on_commit(lambda: send_saga(run.pk))
    return decided


def request_saga(
    *, run: Run, actor: str, requester_id: int | None, source: str
) -> list[Compensation]:
    """Request the compensation of every action of the run that has one."""
    steps = saga_plan(run)
    if not any(step.preview or step.compensation for step in steps):
        raise InvalidInput("no action of this run has a compensation to run")
    for step in steps:
        if step.compensation is not None:
            _move_on(
                step.compensation,
                actor=actor,
                requester_id=requester_id,
                source=source,
                send=False,
            )
        elif step.preview is not None:
            request_compensation(
                record=step.original, actor=actor, requester_id=requester_id, source=source
            )
    requested = saga_compensations(run)
    if any(
        approval.state == ApprovalRequest.State.APPROVED for approval in open_approvals(requested)
    ):  # a saga that stopped, or whose message was lost, goes on where it stopped
        send_saga(run.pk)
    return requested
