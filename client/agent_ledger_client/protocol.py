"""What the sync and async clients share: types, request bodies, and reading the answers.

Nothing here does I/O, so both clients follow exactly the same protocol.
"""

from __future__ import annotations

import hashlib
import json
import random
import uuid
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

DEFAULT_TOOL_TIMEOUT = 30.0  # seconds; seed 001's timeout_seconds
DEFAULT_WAIT_DEADLINE = 60.0
DEFAULT_APPROVAL_DEADLINE = 300.0

#: Tools the client may run without the ledger (read-only by nature). Everything else fails
#: closed: if the ledger cannot be reached, it is not executed.
KNOWN_IDEMPOTENT_TOOLS = frozenset(
    {"read_file", "list_files", "search_code", "get_order_status", "pure_compute"}
)


class LedgerRequestError(Exception):
    """The ledger refused the request itself (bad input, unknown run or tool, auth)."""

    def __init__(self, status: int, problem: dict[str, Any]) -> None:
        super().__init__(f"{status} {problem.get('code')}: {problem.get('detail')}")
        self.status = status
        self.problem = problem


class ToolError(Exception):
    """Raise from a tool to report a definite failure.

    ``retryable=True`` says the call failed *without* side effect (it may be retried under
    the same key); an error code such as ``PERMISSION_DENIED`` is final whatever you say.
    """

    def __init__(self, code: str, message: str = "", *, retryable: bool = False) -> None:
        super().__init__(f"{code}: {message}" if message else code)
        self.code = code
        self.message = message
        self.retryable = retryable


@dataclass(frozen=True)
class CallContext:
    """Handed to your ``execute`` function: pass ``idempotency_key`` to the downstream."""

    call_id: str
    run_id: str
    step_id: str
    tool: str
    input: dict[str, Any]
    idempotency_key: str
    fencing_token: int


@dataclass
class CallOptions:
    step_id: str | None = None
    business_object_id: str | None = None
    timeout: float | None = None
    input_source: str = "model"
    data_classification: str = "internal"
    end_user_id: str = ""
    write_plan: dict[str, Any] | None = None
    wait_deadline: float = DEFAULT_WAIT_DEADLINE
    approval_deadline: float = DEFAULT_APPROVAL_DEADLINE
    max_replays: int = 2
    extra: dict[str, Any] = field(default_factory=dict)


def default_step_id(tool: str, tool_input: dict[str, Any], *, read_only: bool) -> str:
    """The step id when the caller gives none.

    For a tool with side effects it is stable (tool + input), so a call retried after a crash
    maps to the same key and cannot run twice. A read-only tool gets a fresh id per call, so
    reading again reads again instead of returning the first read's recorded result.
    """
    if read_only:
        return f"{tool}:{uuid.uuid4().hex[:16]}"
    canonical = json.dumps(tool_input, sort_keys=True, separators=(",", ":"), default=str)
    return f"{tool}:{hashlib.sha256(canonical.encode()).hexdigest()[:16]}"


def call_body(
    run_id: str, tool: str, tool_input: dict[str, Any], options: CallOptions, *, read_only: bool
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "run_id": run_id,
        "step_id": options.step_id or default_step_id(tool, tool_input, read_only=read_only),
        "tool": tool,
        "input": tool_input,
        "input_source": options.input_source,
        "data_classification": options.data_classification,
        "end_user_id": options.end_user_id,
    }
    if options.business_object_id:
        body["business_object_id"] = options.business_object_id
    if options.write_plan:
        body["write_plan"] = options.write_plan
    return body


def context_from(call: dict[str, Any], tool_input: dict[str, Any]) -> CallContext:
    lease = call["lease"] or {}
    return CallContext(
        call_id=call["call_id"],
        run_id=call["run_id"],
        step_id=call["step_id"],
        tool=call["tool"],
        input=tool_input,
        idempotency_key=call["idempotency_key"],
        fencing_token=int(lease.get("fencing_token", 0)),
    )


def lease_seconds(call: dict[str, Any], now: datetime) -> float:
    expires = datetime.fromisoformat(call["lease"]["expires_at"].replace("Z", "+00:00"))
    return max(1.0, (expires - now).total_seconds())


def complete_body(
    context: CallContext, outcome: str, *, result: Any = None, error: ToolError | None = None
) -> dict[str, Any]:
    body: dict[str, Any] = {"fencing_token": context.fencing_token, "outcome": outcome}
    if outcome == "succeeded":
        body["result"] = result
    if error is not None:
        body["error"] = {"code": error.code, "message": error.message[:4000]}
        body["retryable"] = error.retryable
    return body


def backoff(attempt: int, retry_after: float | None, cap: float = 5.0) -> float:
    """Full-jitter exponential backoff, never shorter than the server's Retry-After."""
    base = min(cap, 0.2 * (2**attempt))
    delay = random.uniform(base / 2, base)  # noqa: S311 - jitter, not security
    return max(delay, retry_after or 0.0)


def unavailable(tool: str, reason: str, *, executed: bool = False) -> dict[str, Any]:
    """The observation when the ledger cannot be reached (fail closed)."""
    if executed:
        content = f"{tool} ran without the ledger (read-only tool); nothing was recorded."
    else:
        content = (
            f"{tool} was NOT executed: the ledger is unreachable ({reason}) and {tool} is not "
            "known to be read-only. Try again later or ask the user."
        )
    return {
        "ok": executed,
        "code": "LEDGER_UNAVAILABLE",
        "content": content,
        "metadata": {"retryable": True, "recorded": False, "next_action": "retry_later"},
    }


def local_outcome(
    tool: str, outcome: str, result: Any, error: ToolError | None, context: CallContext
) -> dict[str, Any]:
    """The observation when the outcome could not be reported to the ledger."""
    metadata = {
        "call_id": context.call_id,
        "idempotency_key": context.idempotency_key,
        "recorded": False,
    }
    if outcome == "succeeded":
        return {"ok": True, "content": result, "metadata": metadata}
    if outcome == "failed" and error is not None:
        return {
            "ok": False,
            "code": error.code,
            "content": f"{tool} failed: {error.message}",
            "metadata": {**metadata, "retryable": error.retryable},
        }
    return {
        "ok": False,
        "code": "SIDE_EFFECT_UNCERTAIN",
        "content": f"{tool} may or may not have taken effect; do not retry it. Look it up by "
        "idempotency key or ask the user.",
        "metadata": {**metadata, "retryable": False, "next_action": "lookup"},
    }
