"""Model-facing observations (DESIGN section 6).

Every decision that is not "go ahead" becomes a structured observation the model can act on.
The wording tells the model what happened and what to do next, and never reads like success.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ledger.domain import Idempotency, ObservationCode, ReplayPolicy

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
