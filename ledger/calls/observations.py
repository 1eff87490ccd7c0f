"""Model-facing observations (DESIGN section 6): what the model is told about a call.

Every decision that is not "go ahead" becomes a structured observation the model can act on.
The wording tells the model what happened and what to do next, and never reads like success.
``observation_for`` is the one place that chooses among them (``refusal`` and ``success``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ledger.calls.values import RETRY_AFTER_SECONDS
from ledger.decisions import next_action_after_failure, recovery_decision
from ledger.domain import (
    Decision,
    EntryStatus,
    Idempotency,
    ObservationCode,
    RecordState,
    ReplayPolicy,
)
from ledger.models import ApprovalRequest, IdempotencyRecord, LedgerEntry
from ledger.redaction import is_altered

_CONTENT = {
    ObservationCode.SIDE_EFFECT_UNCERTAIN: (
        "{tool} was sent but its outcome is unknown (the response timed out or the connection "
        "was lost). It may already have taken effect; do not retry. Look it up by idempotency "
        "key or ask the user."
    ),
    ObservationCode.IN_PROGRESS: (
        "{tool} with the same idempotency key is already being processed. Do not start it "
        "again; wait and ask for its result later."
    ),
    ObservationCode.REPLAY_FORBIDDEN: (
        "{tool} may not be replayed: its earlier failure is final. Do not retry; report the "
        "failure or choose another action."
    ),
    ObservationCode.APPROVAL_REQUIRED: (
        "{tool} needs a human's approval before it runs. It has not been executed. Wait for "
        "the approval or tell the user it is pending."
    ),
    ObservationCode.APPROVAL_REJECTED: (
        "A human rejected running {tool}. It was NOT executed. Reason given: {detail}"
    ),
    ObservationCode.IDEMPOTENCY_KEY_CONFLICT: (
        "{tool} was already requested for this business action with different parameters. "
        "Nothing was executed. Do not change the parameters of an action that was already sent; "
        "ask the user if a different action is intended."
    ),
    ObservationCode.WRITE_CONFLICT: (
        "{tool} was not replayed: the file was changed by someone else since the write was "
        "planned. A human must decide."
    ),
    ObservationCode.ALREADY_APPLIED: (
        "{tool} had already been applied; it was not run again. Continue from its result."
    ),
    ObservationCode.PERMISSION_DENIED: (
        "{tool} was refused: permission denied. Do not retry; ask the user for access."
    ),
    ObservationCode.RUN_HALTED: (
        "This run was halted by an operator (its version combination was stopped). Nothing was "
        "executed. Stop and report to the user."
    ),
    ObservationCode.FAILED: "{tool} failed: {detail}",
    ObservationCode.SHADOW_DRY_RUN: (
        "This is a shadow run: {tool} has side effects, so it was NOT executed. The intended "
        "action is recorded for comparison with the live run. Continue as if it had not run; "
        "do not retry it."
    ),
}

_RETRYABLE = frozenset({ObservationCode.IN_PROGRESS, ObservationCode.APPROVAL_REQUIRED})


@dataclass(frozen=True, slots=True)
class CallContext:
    """What every observation says about the call it answers."""

    tool: str
    idempotency: Idempotency
    replay_policy: ReplayPolicy
    idempotency_key: str | None
    call_id: str

    def metadata(self) -> dict[str, Any]:
        return {
            "idempotency": self.idempotency.value,
            "replay_policy": self.replay_policy.value,
            "idempotency_key": self.idempotency_key,
            "call_id": self.call_id,
        }


def refusal(
    code: ObservationCode,
    context: CallContext,
    *,
    next_action: str,
    detail: str = "",
    retryable: bool | None = None,
    error_code: str | None = None,
    extra: dict[str, Any] | None = None,
    why: str = "",
) -> dict[str, Any]:
    """An ``ok: false`` observation for ``code``; ``why``, when given, is said after it."""
    content = _CONTENT[code].format(tool=context.tool, detail=detail or "no detail")
    if why:
        content = f"{content} Why: {why}"
    metadata = {
        **context.metadata(),
        "retryable": code in _RETRYABLE if retryable is None else retryable,
        "next_action": next_action,
        **(extra or {}),
    }
    return {"ok": False, "code": error_code or code.value, "content": content, "metadata": metadata}


def success(
    result: Any, context: CallContext, *, replayed: bool, extra: dict[str, Any] | None = None
) -> dict[str, Any]:
    """An ``ok: true`` observation carrying the tool's result."""
    metadata = {**context.metadata(), "replayed": replayed, **(extra or {})}
    return {"ok": True, "content": result, "metadata": metadata}


def observation_for(
    entry: LedgerEntry,
    approval: ApprovalRequest | None,
    *,
    next_action: str | None = None,
    replay: bool = False,
) -> dict[str, Any] | None:
    """The observation for a call, None when the runtime may go ahead and run the tool.

    With ``next_action``, the answer to the decision just made (the entry's decision, its
    record and ``approval``, the one opened or found for it), ``replay`` when the call is a
    replay of one that ended uncertain or failed; without, the call as things stand now, for a
    runtime that polls or reports (``approval`` the record's latest).
    """
    context = call_context(entry)
    if next_action is None:
        return _as_it_stands(entry, approval, context)
    if replay:
        return _as_replayed(entry, approval, context, next_action)
    return _as_decided(entry, approval, context, next_action)


def call_context(entry: LedgerEntry) -> CallContext:
    """What every observation of the call names: its tool, class, key and id."""
    return CallContext(
        tool=entry.tool.name,
        idempotency=Idempotency(entry.idempotency),
        replay_policy=ReplayPolicy(entry.replay_policy),
        idempotency_key=entry.idempotency_key or None,
        call_id=str(entry.call_id),
    )


def _as_decided(
    entry: LedgerEntry,
    approval: ApprovalRequest | None,
    context: CallContext,
    next_action: str,
) -> dict[str, Any] | None:
    decision = Decision(entry.decision)
    record = entry.record
    if decision is Decision.EXECUTE:
        return None
    if decision is Decision.RECORDED_RESULT and record is not None:
        return _settled(record, context, replayed=True)
    if decision is Decision.WAIT:
        return refusal(
            ObservationCode.IN_PROGRESS,
            context,
            next_action="wait",
            extra={"retry_after_seconds": RETRY_AFTER_SECONDS},
        )
    if decision is Decision.APPROVAL_REQUIRED:
        return _awaiting_approval(context, approval)
    if decision is Decision.CONFLICT:
        return refusal(ObservationCode.IDEMPOTENCY_KEY_CONFLICT, context, next_action="stop")
    if decision is Decision.SHADOW_DRY_RUN:
        code = ObservationCode.SHADOW_DRY_RUN
        return refusal(code, context, next_action=next_action, retryable=False)
    if approval is not None and approval.state == ApprovalRequest.State.REJECTED:
        return _rejected(context, approval)
    code = ObservationCode(entry.observation_code or ObservationCode.SIDE_EFFECT_UNCERTAIN)
    return refusal(code, context, next_action=next_action)


def _as_replayed(
    entry: LedgerEntry,
    approval: ApprovalRequest | None,
    context: CallContext,
    next_action: str,
) -> dict[str, Any] | None:
    code = entry.observation_code
    if entry.decision == Decision.RECORDED_RESULT and code == ObservationCode.ALREADY_APPLIED:
        assert entry.record is not None
        return {**_settled(entry.record, context, replayed=False), "code": code}
    if entry.decision in (Decision.EXECUTE, Decision.RECORDED_RESULT):
        return _as_decided(entry, approval, context, next_action)
    return refusal(
        ObservationCode(code or ObservationCode.REPLAY_FORBIDDEN),
        context,
        next_action=next_action,
        extra={"approval_id": approval.pk} if approval else {},
        detail=approval.decision_reason if approval else "",
    )


def _as_it_stands(
    entry: LedgerEntry, approval: ApprovalRequest | None, context: CallContext
) -> dict[str, Any] | None:
    record = entry.record
    if record is None:
        code = entry.observation_code
        return refusal(ObservationCode(code), context, next_action="stop") if code else None
    if approval is not None and approval.state == ApprovalRequest.State.REJECTED:
        return _rejected(context, approval)
    state = RecordState(record.state)
    if state in (RecordState.SUCCEEDED, RecordState.FAILED_FINAL):
        # The outcome is this call's own when the record's last execution ran under its token:
        # an execute, or a start after an approval (whose decision stays approval_required).
        own = entry.fencing_token is not None and entry.fencing_token == record.fencing_token
        return _settled(record, context, replayed=not own)
    # A replay waiting for its human is answered by the approval below, not by the record's
    # (still unknown) state: the model must hear "approval pending", not "look it up".
    awaiting_approval = (
        entry.decision == Decision.APPROVAL_REQUIRED
        and approval is not None
        and approval.state in ApprovalRequest.OPEN_STATES
    )
    if state is RecordState.UNKNOWN and not awaiting_approval:
        recovery = recovery_decision(
            replay_policy=ReplayPolicy(entry.replay_policy),
            uncertain=True,
            error_code=None,
            retryable=False,
        )
        return refusal(
            ObservationCode.SIDE_EFFECT_UNCERTAIN,
            context,
            next_action=recovery.action.value,
            retryable=recovery.retryable,
        )
    if entry.status == EntryStatus.STARTED:
        return None  # this call holds the lease: go ahead
    if approval is not None and approval.state == ApprovalRequest.State.APPROVED:
        return refusal(
            ObservationCode.APPROVAL_REQUIRED,
            context,
            next_action="start",
            extra={"approval_id": approval.pk, "approved": True},
        )
    if entry.decision == Decision.APPROVAL_REQUIRED:
        return _awaiting_approval(context, approval)
    return refusal(ObservationCode.IN_PROGRESS, context, next_action="wait")


def _settled(record: IdempotencyRecord, context: CallContext, *, replayed: bool) -> dict[str, Any]:
    """A settled record's outcome, whoever asks: its result (saying when redaction altered it),
    or its error with its own code, and whether a replay may be asked for (a failure that is
    not final: ``IdempotencyRecord.failed_retryably``).
    ``replayed``: the answer comes from the record, not from this call's own execution."""
    if record.state == RecordState.SUCCEEDED:
        altered = {"result_redacted": True} if is_altered(record.result) else None
        return success(record.result, context, replayed=replayed, extra=altered)
    error = record.error or {}
    retryable = record.failed_retryably
    return refusal(
        ObservationCode.FAILED,
        context,
        next_action=next_action_after_failure(final=not retryable),
        detail=str(error.get("message") or error.get("code") or "no detail"),
        retryable=retryable,
        error_code=str(error.get("code") or "FAILED"),
        extra={"replayed": replayed},
    )


def _awaiting_approval(context: CallContext, approval: ApprovalRequest | None) -> dict[str, Any]:
    """Waiting for a human; an approval policy that asked before the first run says why, and
    is named in ``approval_policy`` (a hold of a first run, not of a replay)."""
    extra: dict[str, Any] = {"approval_id": approval.pk} if approval else {}
    policy = approval.policy if approval is not None and approval.policy_id else None
    if policy is not None:
        extra["approval_policy"] = policy.name
    return refusal(
        ObservationCode.APPROVAL_REQUIRED,
        context,
        next_action="await_approval",
        extra=extra,
        why=f"{policy.name}: {policy.reason}" if policy is not None else "",
    )


def _rejected(context: CallContext, approval: ApprovalRequest) -> dict[str, Any]:
    """A human rejected this exact action: the rejection stands."""
    return refusal(
        ObservationCode.APPROVAL_REJECTED,
        context,
        next_action="stop",
        detail=approval.decision_reason,
    )
