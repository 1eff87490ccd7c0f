"""Recovering a call that ended uncertain or failed (DESIGN sections 4 and 5): the replay
policy decides, a conditional write is checked against the file's hash the runtime reports,
and the replay is itself a new ledger entry of the same record."""

from __future__ import annotations

from django.db import transaction

from ledger import records, shadow
from ledger.calls import entries
from ledger.calls.approval import rejected, rejection_of
from ledger.calls.observe import observation_for
from ledger.calls.selectors import entry_for
from ledger.calls.values import Caller, CallResult, Lease, entry_classification
from ledger.decisions import RecoveryAction, WriteCheck, check_write_plan
from ledger.domain import (
    WRITE_CONFLICT_ESCALATION,
    Decision,
    EscalationKind,
    ObservationCode,
    ReplayPolicy,
)
from ledger.errors import InvalidTransition
from ledger.models import ApprovalRequest, AuditEvent, IdempotencyRecord
from ledger.records import Outcome
from ledger.records.escalation import escalate
from ledger.services import approvals


def replay_call(*, caller: Caller, call_id: str, current_hash: str | None = None) -> CallResult:
    """The recovery decision for a call that ended uncertain or failed (DESIGN section 4).

    The replay request is itself a new ledger entry pointing at the same record.
    """
    original = entry_for(caller, call_id)
    shadow.refuse_follow_up(original.run, original.decision)
    record = original.record
    if record is None:
        raise InvalidTransition("this call has no idempotency record to recover")
    classification = entry_classification(original)
    with transaction.atomic():
        found = records.lock_by_key(record.tenant_id, record.key)
        if found is None:
            raise InvalidTransition("this call's idempotency record has expired")
        locked, now, lapsed = found
        # The state table answers a replay as it answers a duplicate (a failed record aside,
        # which a replay asks to recover); an automatic replay is the same transition.
        answer = records.answer_locked(
            locked,
            fingerprint=locked.fingerprint,
            replay_policy=ReplayPolicy(original.replay_policy),
            lease_owner=caller.identity,
            actor=caller.identity,
            source=AuditEvent.Source.API,
            now=now,
            lapsed=lapsed,
            replay=True,
        )
        decision, code, next_action = answer.decision, answer.code, answer.next_action
        lease = (
            Lease(locked.fencing_token, locked.lease_expires_at)  # type: ignore[arg-type]
            if answer.reexecute
            else None
        )
        if answer.recovery is RecoveryAction.CHECK_CONDITION and current_hash:
            decision, code, next_action = _check_condition(
                caller, locked, current_hash, (decision, code, next_action)
            )
        entry = entries.add_retry(
            original,
            caller=caller,
            record=locked,
            decision=decision,
            code=code.value if code else "",
            lease=lease,
        )
        approval = None
        if decision is Decision.APPROVAL_REQUIRED:
            approval = approvals.open_approval(locked) or rejection_of(locked, entry)
            if approval is not None and approval.state == ApprovalRequest.State.REJECTED:
                rejected(entry)
                decision, next_action = Decision.FORBIDDEN, "stop"
            elif approval is None:
                approval = approvals.request_approval(
                    record=locked,
                    entry=entry,
                    requested_by=caller.identity,
                    requester_id=caller.user_id,
                    **_condition(locked, current_hash),
                )
    result = CallResult(entry, decision, classification, lease=lease, approval=approval)
    result.observation = observation_for(entry, approval, next_action=next_action, replay=True)
    return result


Answer = tuple[Decision, ObservationCode | None, str]


def _check_condition(
    caller: Caller, record: IdempotencyRecord, current_hash: str, waiting: Answer
) -> Answer:
    plan = record.write_plan
    if plan is None:
        return waiting
    check = check_write_plan(
        current_hash=current_hash, before_hash=plan.before_hash, after_hash=plan.after_hash
    )
    if check is WriteCheck.ALREADY_APPLIED:
        records.resolve_unknown(
            record=record,
            outcome=Outcome.SUCCEEDED,
            actor=caller.identity,
            result={"already_applied": True, "path": plan.path},
            detail="the file already has the planned content (after_hash)",
        )
        return Decision.RECORDED_RESULT, ObservationCode.ALREADY_APPLIED, "use_result"
    if check is WriteCheck.CONFLICT:
        escalate(
            record,
            EscalationKind.WRITE_CONFLICT,
            WRITE_CONFLICT_ESCALATION,
            actor=caller.identity,
            source=AuditEvent.Source.API,
            once=True,
        )
        return Decision.FORBIDDEN, ObservationCode.WRITE_CONFLICT, "ask_human"
    return waiting


def _condition(record: IdempotencyRecord, current_hash: str | None) -> dict[str, str]:
    """What the approver is told about a conditional write's file, kept with the request."""
    plan = record.write_plan
    if plan is None:
        return {}
    if not current_hash:
        return {"detail": "the runtime sent no current hash of the file", "condition": ""}
    check = check_write_plan(
        current_hash=current_hash, before_hash=plan.before_hash, after_hash=plan.after_hash
    )
    return {"detail": f"{plan.path} now has hash {current_hash[:12]}", "condition": check.value}
