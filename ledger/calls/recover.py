"""Recovering a call that ended uncertain or failed (DESIGN sections 4 and 5): the replay
policy decides, a conditional write is checked against the file's hash the runtime reports,
and the replay is itself a new ledger entry of the same record."""

from __future__ import annotations

from datetime import datetime
from typing import Any, NamedTuple

from django.db import transaction

from ledger import records, shadow
from ledger.calls import entries
from ledger.calls.approval import rejected, rejection_of
from ledger.calls.observations import observation_for
from ledger.calls.same_input import refuse_other_input
from ledger.calls.selectors import entry_for
from ledger.calls.values import Caller, CallResult, Lease, entry_classification
from ledger.decisions import (
    ExistingRecordAnswer,
    WriteCheckAction,
    WriteCheckAnswer,
    answer_write_check,
    check_write_plan,
)
from ledger.domain import Decision, RecordState, ReplayPolicy
from ledger.errors import InvalidTransition
from ledger.models import ApprovalRequest, AuditEvent, IdempotencyRecord, LedgerEntry, WritePlan
from ledger.services import approvals


def replay_call(
    *, caller: Caller, call_id: str, tool_input: Any, current_hash: str | None = None
) -> CallResult:
    """The recovery decision for a call that ended uncertain or failed (DESIGN section 4), for
    a replay that would run ``tool_input`` (the recorded action's, or refused).

    The replay request is itself a new ledger entry pointing at the same record.
    """
    original = entry_for(caller, call_id)
    shadow.refuse_follow_up(original.run, original.decision)
    record = original.record
    if record is None:
        raise InvalidTransition("this call has no idempotency record to recover")
    refuse_other_input(
        caller=caller, entry=original, record=record, tool_input=tool_input, step="replay"
    )
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
        lease = (
            Lease(locked.fencing_token, locked.lease_expires_at)  # type: ignore[arg-type]
            if answer.reexecute
            else None
        )
        checked = _write_check(locked, answer, current_hash)
        if checked is not None:
            answer = checked.answered.answer
            if checked.answered.action is WriteCheckAction.SETTLE:
                # Settled before the retry's entry is written, which then ends as the record did.
                _apply(checked, locked, now=now, caller=caller, entry=None)
                checked = None
        decision, next_action = answer.decision, answer.next_action
        entry = entries.add_retry(
            entries.retry_of(original, caller),
            decision=decision,
            record=locked,
            code=answer.code.value if answer.code else "",
        )
        approval = rejection_of(locked, entry) if decision is Decision.APPROVAL_REQUIRED else None
        if approval is not None:
            rejected(entry)
            decision, next_action = Decision.FORBIDDEN, "stop"
        elif checked is not None:
            approval = _apply(checked, locked, now=now, caller=caller, entry=entry)
        elif decision is Decision.APPROVAL_REQUIRED:
            approval = approvals.request_approval(
                record=locked,
                entry=entry,
                requested_by=caller.identity,
                requester_id=caller.user_id,
                detail=_unchecked(locked),
            )
    result = CallResult(entry, decision, classification, lease=lease, approval=approval)
    result.observation = observation_for(entry, approval, next_action=next_action, replay=True)
    entries.told(entry, result.observation)
    return result


def _apply(
    checked: _Checked,
    locked: IdempotencyRecord,
    *,
    now: datetime,
    caller: Caller,
    entry: LedgerEntry | None,
) -> ApprovalRequest | None:
    return records.apply_write_check(
        locked,
        checked.answered,
        plan=checked.plan,
        current_hash=checked.current_hash,
        now=now,
        actor=caller.identity,
        source=AuditEvent.Source.API,
        entry=entry,
        requester_id=caller.user_id,
    )


class _Checked(NamedTuple):
    """A write plan checked against the file's hash the runtime reports, and what that means."""

    plan: WritePlan
    current_hash: str
    answered: WriteCheckAnswer


def _write_check(
    record: IdempotencyRecord, answer: ExistingRecordAnswer, current_hash: str | None
) -> _Checked | None:
    """The write plan check (DESIGN section 5) of a replay the recovery decision puts to a
    human; None without a plan or a hash to check it by."""
    plan = record.write_plan
    if plan is None or not current_hash or answer.recovery is None:
        return None
    if answer.decision is not Decision.APPROVAL_REQUIRED:
        return None
    check = check_write_plan(
        current_hash=current_hash, before_hash=plan.before_hash, after_hash=plan.after_hash
    )
    uncertain = record.state == RecordState.UNKNOWN
    return _Checked(plan, current_hash, answer_write_check(check, uncertain=uncertain))


def _unchecked(record: IdempotencyRecord) -> str:
    """What the approver is told about a conditional write whose file was not checked."""
    return "" if record.write_plan is None else "the runtime sent no current hash of the file"
