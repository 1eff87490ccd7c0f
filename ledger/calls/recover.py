"""Recovering a call that ended uncertain or failed (DESIGN sections 4 and 5): the replay
policy decides, a conditional write is checked against the file's hash the runtime reports,
and the replay is itself a new ledger entry of the same record."""

from __future__ import annotations

from typing import Any

from django.db import transaction

from ledger import records, shadow
from ledger.calls import entries
from ledger.calls.approval import rejected, rejection_of
from ledger.calls.observe import observation_for
from ledger.calls.selectors import entry_for
from ledger.calls.values import Caller, CallResult, Lease, entry_classification
from ledger.decisions import RecoveryAction, WriteCheck, check_write_plan, recovery_decision
from ledger.domain import (
    WRITE_CONFLICT_ESCALATION,
    Decision,
    EscalationKind,
    ObservationCode,
    RecordState,
    ReplayPolicy,
)
from ledger.errors import InvalidTransition
from ledger.models import ApprovalRequest, AuditEvent, IdempotencyRecord, LedgerEntry
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
        locked = IdempotencyRecord.objects.select_for_update().get(pk=record.pk)
        state = RecordState(locked.state)
        error = locked.error or {}
        decision, code, next_action, approval, lease = _recover(
            caller, original, locked, state, error, current_hash
        )
        entry = entries.add_retry(
            original,
            caller=caller,
            record=locked,
            decision=decision,
            code=code.value if code else "",
            lease=lease,
        )
        if decision is Decision.APPROVAL_REQUIRED and approval is None:
            approval = rejection_of(locked, entry)
            if approval is not None:
                rejected(entry)
                decision, next_action = Decision.FORBIDDEN, "stop"
            else:
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


def _recover(
    caller: Caller,
    original: LedgerEntry,
    record: IdempotencyRecord,
    state: RecordState,
    error: dict[str, Any],
    current_hash: str | None,
) -> tuple[Decision, ObservationCode | None, str, ApprovalRequest | None, Lease | None]:
    if state is RecordState.SUCCEEDED:
        return Decision.RECORDED_RESULT, None, "use_result", None, None
    if state in (RecordState.RESERVED, RecordState.EXECUTING):
        return Decision.WAIT, ObservationCode.IN_PROGRESS, "wait", None, None
    recovery = recovery_decision(
        replay_policy=ReplayPolicy(original.replay_policy),
        uncertain=state is RecordState.UNKNOWN,
        error_code=error.get("code"),
        retryable=record.error_retryable,
    )
    approval = approvals.open_approval(record)
    if recovery.action is RecoveryAction.REPLAY:
        records.start_execution(
            record=record, lease_owner=caller.identity, actor=caller.identity, approved=True
        )
        record.refresh_from_db()
        lease = Lease(record.fencing_token, record.lease_expires_at)  # type: ignore[arg-type]
        return Decision.EXECUTE, None, "execute", None, lease
    if recovery.action is RecoveryAction.CHECK_CONDITION:
        plan = record.write_plan
        if plan is not None and current_hash:
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
                return (
                    Decision.RECORDED_RESULT,
                    ObservationCode.ALREADY_APPLIED,
                    "use_result",
                    None,
                    None,
                )
            if check is WriteCheck.CONFLICT:
                escalate(
                    record,
                    EscalationKind.WRITE_CONFLICT,
                    WRITE_CONFLICT_ESCALATION,
                    actor=caller.identity,
                    source=AuditEvent.Source.API,
                    once=True,
                )
                return Decision.FORBIDDEN, ObservationCode.WRITE_CONFLICT, "ask_human", None, None
    # A condition not yet decided by the file's hash waits for a human, as an ask does.
    if recovery.action in (RecoveryAction.CHECK_CONDITION, RecoveryAction.ASK_HUMAN):
        return (
            Decision.APPROVAL_REQUIRED,
            ObservationCode.APPROVAL_REQUIRED,
            "await_approval",
            approval,
            None,
        )
    if recovery.action is RecoveryAction.LOOKUP:
        return Decision.FORBIDDEN, ObservationCode.SIDE_EFFECT_UNCERTAIN, "lookup", None, None
    return Decision.FORBIDDEN, recovery.code, "stop", None, None


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
