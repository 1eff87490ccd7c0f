"""Compensating actions (docs/compensation.md): declared for a tool or one call, previewed,
requested, decided by a human, then run by a worker through the compensating tool's
compensation adapter, as a side effect of its own in the ledger: its own record (the original
key plus ``ledger.compensation.KEY_SUFFIX``), ledger entry and approval; the key passed
downstream; an unknown outcome looked up like any other record's, never sent again.

A run is compensated as a whole (a saga) by the same steps for each of its actions, newest
first, stopping at the first one that does not succeed.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import httpx
from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction
from django.db.models.functions import Now

from ledger.compensation import (
    KEY_SUFFIX,
    CompensationError,
    compensation_arguments,
    compensation_key,
    fill_url,
    validate_arguments,
)
from ledger.domain import (
    Decision,
    EntryStatus,
    Idempotency,
    InputSource,
    ObservationCode,
    RecordState,
    ReplayPolicy,
)
from ledger.errors import ApprovalError, InvalidInput, InvalidTransition, NotFound
from ledger.keys import fingerprint
from ledger.models import (
    ApprovalRequest,
    AuditEvent,
    Compensation,
    DeclaredCompensation,
    IdempotencyRecord,
    LedgerEntry,
    Run,
    Tool,
)
from ledger.outbound import OutboundRefused, check_url, post_json
from ledger.services import approvals, records
from ledger.services.audit import audit
from ledger.services.entries import transition_entry
from ledger.services.records import Outcome
from reconcile.models import CompensationAdapter

logger = logging.getLogger(__name__)


def _startable(record: IdempotencyRecord) -> bool:
    """A worker may still start it (with a granted approval): waiting, or known not to have
    happened and safe to send again."""
    return record.state == RecordState.RESERVED or (
        record.state == RecordState.FAILED_FINAL and record.error_retryable
    )


# --- declarations ---------------------------------------------------------------------------


def _compensating_tool(tool: Tool, name: str) -> Tool:
    found = Tool.objects.filter(tenant_id=tool.tenant_id, name=name).first()
    if found is None:
        raise NotFound(f"no tool {name!r}: register the compensating tool first")
    if found.pk == tool.pk:
        raise InvalidInput("a tool cannot compensate itself")
    return found


def declare_compensation(
    *,
    tool: Tool,
    compensating_tool: str,
    arguments: Any,
    actor: str,
    source: str,
    record: IdempotencyRecord | None = None,
) -> DeclaredCompensation:
    """Declare how ``tool``'s action is undone; with ``record``, for that one call only, which
    must not have finished yet (the runtime registers it before running the tool)."""
    try:
        mapping = validate_arguments(arguments)
    except CompensationError as exc:
        raise InvalidInput(str(exc)) from None
    target = _compensating_tool(tool, compensating_tool)
    if record is not None and record.state not in (RecordState.RESERVED, RecordState.EXECUTING):
        raise InvalidTransition(
            f"a call's compensation is registered before it completes; it is {record.state}"
        )
    owner: dict[str, Any] = {"record": record} if record is not None else {"tool": tool}
    with transaction.atomic():
        declared, created = DeclaredCompensation.objects.update_or_create(
            **owner,
            defaults={
                "tenant_id": tool.tenant_id,
                "compensating_tool": target,
                "arguments": mapping,
                "declared_by": actor,
            },
        )
        audit(
            tenant=tool.tenant_id,
            actor=actor,
            action="compensation.declared",
            target=record if record is not None else tool,
            source=source,
            after={"tool": tool.name, "compensating_tool": target.name, "arguments": mapping},
            detail="declared" if created else "changed",
        )
    return declared


def declaration_for(record: IdempotencyRecord) -> DeclaredCompensation | None:
    """The call's own declaration, else its tool's."""
    declarations = DeclaredCompensation.objects.select_related("compensating_tool")
    return (
        declarations.filter(record=record).first()
        or declarations.filter(tool_id=record.tool_id).first()
    )


# --- preview and request --------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Preview:
    """The exact call a compensation makes."""

    original: IdempotencyRecord
    tool: Tool
    arguments: dict[str, Any]
    key: str
    url: str

    def as_dict(self) -> dict[str, Any]:
        return {
            "original_key": self.original.key,
            "tool": self.tool.name,
            "arguments": self.arguments,
            "idempotency_key": self.key,
            "url": self.url,
        }


def is_compensation(record: IdempotencyRecord) -> bool:
    return Compensation.objects.filter(tenant_id=record.tenant_id, key=record.key).exists()


def _first_entry(record: IdempotencyRecord) -> LedgerEntry:
    entry = LedgerEntry.objects.select_related("run").filter(record=record).order_by("pk").first()
    if entry is None:
        raise InvalidTransition("the action has no ledger entry to take its input from")
    return entry


def preview(*, record: IdempotencyRecord) -> Preview:
    """The compensation of a succeeded action, built now (or as it was requested). Raises,
    writing nothing, when there is none to make."""
    existing = Compensation.objects.select_related("tool").filter(original=record).first()
    if existing is not None:
        return Preview(record, existing.tool, existing.arguments, existing.key, existing.url)
    if is_compensation(record):
        raise InvalidInput("a compensation is not compensated in turn")
    if record.state != RecordState.SUCCEEDED:
        raise InvalidTransition(
            f"only an action that happened (succeeded) can be compensated; it is {record.state}"
        )
    declared = declaration_for(record)
    if declared is None:
        raise InvalidInput(f"{record.tool.name} declares no compensation")
    tool = declared.compensating_tool
    adapter = CompensationAdapter.objects.filter(tool=tool).first()
    if adapter is None:
        raise InvalidInput(f"{tool.name} has no compensation adapter to run it")
    try:
        arguments = compensation_arguments(
            declared.arguments, tool_input=_first_entry(record).input, result=record.result
        )
        key = compensation_key(record.key)
        url = fill_url(adapter.url_template, arguments)
        check_url(url)
    except (CompensationError, OutboundRefused) as exc:
        raise InvalidInput(str(exc)) from None
    return Preview(record, tool, arguments, key, url)


def compensation_record(compensation: Compensation) -> IdempotencyRecord | None:
    return (
        IdempotencyRecord.objects.select_related("tool")
        .filter(tenant_id=compensation.tenant_id, key=compensation.key)
        .first()
    )


def compensation_run(original_run: Run) -> Run:
    """The run a run's compensations are entered in: a human's clean-up, under no version
    combination, so that halting or rolling back the original's combination (which halts the
    original run and voids its approvals) never blocks undoing what it did."""
    run, _created = Run.objects.get_or_create(
        tenant_id=original_run.tenant_id,
        run_id=f"{original_run.run_id}{KEY_SUFFIX}"[:200],
        defaults={"user_id": original_run.user_id},
    )
    return run


def _entry_for(
    call: Preview, first: LedgerEntry, record: IdempotencyRecord, *, retry: bool = False
) -> LedgerEntry:
    """A ledger entry of the compensation: a call of the compensating tool that waits for a
    human, in the compensation run of the original's (``first`` is the original's first
    entry)."""
    tool = call.tool
    return LedgerEntry.objects.create(
        tenant_id=record.tenant_id,
        step_id=f"compensate:{first.step_id}"[:200],
        run=compensation_run(first.run),
        tool=tool,
        input_hash=fingerprint(call.arguments),
        input=call.arguments,
        status=EntryStatus.PLANNED,
        idempotency=tool.idempotency,
        replay_policy=tool.replay_policy,
        destructive=tool.destructive,
        classification_reason=tool.reason,
        classification_rule=tool.rule,
        idempotency_key=call.key,
        record=record,
        decision=Decision.APPROVAL_REQUIRED,
        observation_code=ObservationCode.APPROVAL_REQUIRED,
        input_source=InputSource.USER,
        data_classification=first.data_classification,
        combination=None,
        reused_record=retry,
    )


def request_compensation(
    *, record: IdempotencyRecord, actor: str, requester_id: int | None, source: str
) -> Compensation:
    """Ask for the compensation of ``record``: its own record, entry and approval request.
    Asking again creates nothing; it moves the existing compensation on if it is stuck (a
    look-up for an unknown one, a new approval request for one known not to have run)."""
    existing = Compensation.objects.filter(original=record).first()
    if existing is not None:
        _move_on(existing, actor=actor, requester_id=requester_id)
        return existing
    planned = preview(record=record)
    first = _first_entry(record)
    with transaction.atomic():
        # One request at a time per original: the second waits here, then finds the first's.
        IdempotencyRecord.objects.select_for_update().filter(pk=record.pk).first()
        existing = Compensation.objects.filter(original=record).first()
        if existing is not None:
            return existing
        tool = planned.tool
        reservation = records.reserve_key(
            tenant=record.tenant,
            tool=tool,
            key=planned.key,
            fingerprint=fingerprint(planned.arguments),
            replay_policy=ReplayPolicy(tool.replay_policy),
            lease_owner=actor,
            actor=actor,
            source=source,
            requires_approval=True,
            run=compensation_run(first.run),
            combination=None,
        )
        if not reservation.created:
            raise InvalidTransition(f"the key {planned.key} is already used by another action")
        comp_record = reservation.record
        entry = _entry_for(planned, first, comp_record)
        compensation = Compensation.objects.create(
            tenant_id=record.tenant_id,
            original=record,
            key=planned.key,
            tool=tool,
            arguments=planned.arguments,
            url=planned.url,
            run=first.run,
            requested_by=actor,
        )
        audit(
            tenant=record.tenant_id,
            actor=actor,
            action="compensation.requested",
            target=record,
            source=source,
            after=planned.as_dict(),
        )
        approvals.request_approval(
            record=comp_record,
            entry=entry,
            requested_by=actor,
            requester_id=requester_id,
            detail=f"compensate {record.key}",
        )
    return compensation


def _move_on(
    compensation: Compensation, *, actor: str, requester_id: int | None, send: bool = True
) -> None:
    """A repeated request: never a second execution; at most a look-up, a lost message sent
    again (unless not ``send``: a saga sends its own), or a new approval request (for one whose
    request lapsed, or one known not to have run)."""
    from reconcile.services import request_lookup

    record = compensation_record(compensation)
    if record is None:
        return
    state = RecordState(record.state)
    if state is RecordState.UNKNOWN:
        request_lookup(record=record, actor=actor)
    elif state is RecordState.RESERVED:
        approval = approvals.open_approval(record)
        if approval is None:  # its request expired, was rejected or voided: ask a human again
            entry = LedgerEntry.objects.select_related("tool").filter(record=record).latest("pk")
            approvals.request_approval(
                record=record,
                entry=entry,
                requested_by=actor,
                requester_id=requester_id,
                detail=f"compensate {compensation.original.key}: asked again",
            )
        elif approval.state == ApprovalRequest.State.APPROVED and send:
            from reconcile.tasks import send_compensations

            send_compensations([compensation.pk])
    elif (
        state is RecordState.FAILED_FINAL
        and record.error_retryable
        and approvals.open_approval(record) is None
    ):
        original = compensation.original
        call = Preview(original, compensation.tool, compensation.arguments, compensation.key, "")
        with transaction.atomic():
            entry = _entry_for(call, _first_entry(original), record, retry=True)
            approvals.request_approval(
                record=record,
                entry=entry,
                requested_by=actor,
                requester_id=requester_id,
                detail=f"compensate {compensation.original.key} again: it did not run",
            )


# --- the human decision ---------------------------------------------------------------------


def pending_approval(compensation: Compensation) -> ApprovalRequest | None:
    record = compensation_record(compensation)
    return approvals.open_approval(record) if record is not None else None


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
    if not reason.strip():
        raise InvalidInput("deciding a compensation needs a reason")
    waiting = [
        approval
        for c in compensations
        if (approval := pending_approval(c)) is not None
        and approval.state == ApprovalRequest.State.PENDING
    ]
    if not waiting:
        raise ApprovalError("no compensation here waits for a decision")
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
        from reconcile.tasks import send_compensations

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
        from reconcile.tasks import send_saga

        transaction.on_commit(lambda: send_saga(run.pk))
    return decided


def compensation_of_approval(approval: ApprovalRequest) -> Compensation | None:
    """The compensation an approval request is about, if it is one."""
    return Compensation.objects.filter(
        tenant_id=approval.tenant_id, key=approval.record.key
    ).first()


# --- the worker ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Sent:
    outcome: Outcome
    result: Any = None
    error: dict[str, Any] | None = None
    retryable: bool = False


def _send(adapter: CompensationAdapter, compensation: Compensation) -> Sent:
    """POST the compensating call with its key; what came of it."""
    try:
        response = post_json(
            compensation.url,
            compensation.arguments,
            timeout=adapter.timeout_seconds,
            headers={"Idempotency-Key": compensation.key},
        )
    except OutboundRefused as exc:
        return _not_sent("OUTBOUND_REFUSED", str(exc))
    except (httpx.ConnectError, httpx.ConnectTimeout) as exc:  # nothing reached the downstream
        return _not_sent("NOT_SENT", str(exc))
    except httpx.TransportError as exc:  # sent; the answer was lost
        return Sent(Outcome.UNCERTAIN, error={"code": "NO_RESPONSE", "message": str(exc)[:500]})
    status = response.status_code
    if status in (adapter.success_statuses or [200, 201]):
        try:
            body = response.json()
        except ValueError:
            body = None
        return Sent(Outcome.SUCCEEDED, body if isinstance(body, dict) else {"status": status})
    error = {"code": f"HTTP_{status}", "message": response.text[:500]}
    if status >= 500:  # the downstream may have done it before failing: look it up
        return Sent(Outcome.UNCERTAIN, error=error)
    return Sent(Outcome.FAILED, error=error)


def _not_sent(code: str, message: str) -> Sent:
    """Known not to have reached the downstream: failed, and safe to run again."""
    return Sent(Outcome.FAILED, error={"code": code, "message": message[:500]}, retryable=True)


def run_compensation(compensation_id: int, *, worker: str) -> str:
    """Run one approved compensation, once: start its record with the granted approval (used
    up in the same transaction), POST, record the outcome. Anything else (not approved yet,
    already running or done, unknown and being looked up) is left as it is. Safe to repeat."""
    compensation = Compensation.objects.select_related("tool").filter(pk=compensation_id).first()
    record = compensation_record(compensation) if compensation is not None else None
    if compensation is None or record is None:
        return "missing"
    actor = f"worker:{worker}"
    try:
        with transaction.atomic():
            locked, _now = records.lock_record(record.pk)
            if not _startable(locked):
                return str(locked.state)
            entry = (
                LedgerEntry.objects.select_related("tool", "combination", "run")
                .filter(record=locked)
                .latest("pk")
            )
            approvals.consume(record=locked, entry=entry, actor=actor)
            started = records.start_execution(
                record=locked,
                lease_owner=actor,
                actor=actor,
                source=AuditEvent.Source.WORKER,
                approved=True,
            )
            transition_entry(entry, EntryStatus.APPROVED)
            transition_entry(
                entry, EntryStatus.STARTED, started_at=Now(), fencing_token=started.fencing_token
            )
    except approvals.ApprovalVoid as void:
        approvals.invalidate(approval=void.approval, actor=actor, detail=str(void))
        return "approval-void"
    except ApprovalError:
        return "not-approved"
    except InvalidTransition:
        return "refused"
    adapter = CompensationAdapter.objects.filter(tool=compensation.tool).first()
    sent = (
        _send(adapter, compensation)
        if adapter is not None
        else _not_sent("NO_ADAPTER", f"{compensation.tool.name} has no compensation adapter")
    )
    records.complete_execution(
        record=started,
        fencing_token=started.fencing_token,
        outcome=sent.outcome,
        actor=actor,
        source=AuditEvent.Source.WORKER,
        result=sent.result,
        error=sent.error,
        retryable=sent.retryable,
        entry=entry,
    )
    logger.info("compensation", extra={"compensation": compensation.pk, "outcome": sent.outcome})
    return sent.outcome.value


# --- a run as a whole (saga) ---------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SagaStep:
    """One action of a run, newest first: its compensation (requested or previewed), or why
    it has none."""

    original: IdempotencyRecord
    compensation: Compensation | None = None
    preview: Preview | None = None
    problem: str = ""

    @property
    def state(self) -> str:
        """``compensated``, the compensation record's state, ``planned``, or ``none``."""
        if self.compensation is not None:
            record = compensation_record(self.compensation)
            if record is None:
                return "missing"
            return "compensated" if record.state == RecordState.SUCCEEDED else str(record.state)
        return "planned" if self.preview is not None else "none"


def _run_actions(run: Run) -> list[IdempotencyRecord]:
    """The run's succeeded non-idempotent actions, newest first, compensations left out."""
    keys = Compensation.objects.filter(tenant_id=run.tenant_id).values("key")
    return list(
        IdempotencyRecord.objects.select_related("tool")
        .filter(
            tenant_id=run.tenant_id,
            run=run,
            state=RecordState.SUCCEEDED,
            classified_as=Idempotency.NON_IDEMPOTENT,
        )
        .exclude(key__in=keys)
        .order_by("-created_at", "-pk")
    )


def saga_plan(run: Run) -> list[SagaStep]:
    """What compensating ``run`` as a whole does, in the order it would do it."""
    existing = {c.original_id: c for c in Compensation.objects.filter(run=run)}
    steps = []
    for record in _run_actions(run):
        if record.pk in existing:
            steps.append(SagaStep(record, compensation=existing[record.pk]))
            continue
        try:
            steps.append(SagaStep(record, preview=preview(record=record)))
        except (InvalidInput, InvalidTransition) as exc:
            steps.append(SagaStep(record, problem=exc.message))
    return steps


def saga_compensations(run: Run) -> list[Compensation]:
    """The run's compensations in saga order (newest original first)."""
    return list(
        Compensation.objects.select_related("original", "tool")
        .filter(run=run)
        .order_by("-original__created_at", "-original__pk")
    )


def request_saga(
    *, run: Run, actor: str, requester_id: int | None, source: str
) -> list[Compensation]:
    """Request the compensation of every action of the run that has one."""
    steps = saga_plan(run)
    if not any(step.preview or step.compensation for step in steps):
        raise InvalidInput("no action of this run has a compensation to run")
    for step in steps:
        if step.compensation is not None:
            _move_on(step.compensation, actor=actor, requester_id=requester_id, send=False)
        elif step.preview is not None:
            request_compensation(
                record=step.original, actor=actor, requester_id=requester_id, source=source
            )
    requested = saga_compensations(run)
    if any(
        (approval := pending_approval(c)) is not None
        and approval.state == ApprovalRequest.State.APPROVED
        for c in requested
    ):  # a saga that stopped, or whose message was lost, goes on where it stopped
        from reconcile.tasks import send_saga

        send_saga(run.pk)
    return requested


def run_saga(run_pk: int, *, worker: str) -> dict[str, Any]:
    """Run the run's approved compensations one at a time, newest first, and stop at the first
    that does not succeed; what was done and what is left. Steps already compensated are
    passed over, so running it again continues where it stopped."""
    run = Run.objects.get(pk=run_pk)
    steps = saga_compensations(run)
    done: list[str] = []
    for position, compensation in enumerate(steps):
        record = compensation_record(compensation)
        if record is not None and _startable(record):
            run_compensation(compensation.pk, worker=worker)
            record = compensation_record(compensation)
        state = record.state if record is not None else "missing"
        if state != RecordState.SUCCEEDED:
            left = [c.key for c in steps[position + 1 :]]
            audit(
                tenant=run.tenant_id,
                actor=f"worker:{worker}",
                action="compensation.saga_stopped",
                target=run,
                source=AuditEvent.Source.WORKER,
                after={"stopped_at": compensation.key, "state": state, "not_run": left},
                detail=f"{compensation.key} is {state}; {len(left)} not run",
            )
            return {"done": done, "stopped_at": compensation.key, "state": state, "not_run": left}
        done.append(compensation.key)
    audit(
        tenant=run.tenant_id,
        actor=f"worker:{worker}",
        action="compensation.saga_done",
        target=run,
        source=AuditEvent.Source.WORKER,
        after={"done": done},
    )
    return {"done": done, "stopped_at": None, "state": "compensated", "not_run": []}


def compensation_view(record: IdempotencyRecord) -> dict[str, Any] | None:
    """What a record page or the API shows of compensation: for a compensated action its
    compensation's key and state (``compensated`` once it succeeded); for a compensation the
    action it undoes."""
    compensation = Compensation.objects.filter(original=record).first()
    if compensation is not None:
        comp_record = compensation_record(compensation)
        state = comp_record.state if comp_record is not None else "missing"
        return {
            "role": "compensated_by",
            "key": compensation.key,
            "record_id": comp_record.pk if comp_record else None,
            "state": "compensated" if state == RecordState.SUCCEEDED else state,
        }
    undone = (
        Compensation.objects.select_related("original")
        .filter(tenant_id=record.tenant_id, key=record.key)
        .first()
    )
    if undone is not None:
        return {
            "role": "compensates",
            "key": undone.original.key,
            "record_id": undone.original_id,
            "state": undone.original.state,
        }
    return None
