"""The observations the client writes itself, when the ledger cannot write them."""

from __future__ import annotations

import json
from typing import Any


def normalised(observation: dict[str, Any]) -> dict[str, Any]:
    """Every observation says whether it was answered from the record (``metadata.replayed``),
    so ``observation["metadata"]["replayed"]`` holds for every decision."""
    metadata = observation.setdefault("metadata", {})
    metadata.setdefault("replayed", False)
    return observation


def unavailable(tool: str, reason: str, *, result: Any = None, executed: bool = False) -> dict:
    """The ledger cannot be reached: fail closed, unless the tool is read-only and ran."""
    if executed:
        return {
            "ok": True,
            "content": result,
            "metadata": {"recorded": False, "replayed": False, "next_action": "none"},
        }
    return {
        "ok": False,
        "code": "LEDGER_UNAVAILABLE",
        "content": (
            f"{tool} was NOT executed: the ledger is unreachable ({reason}) and {tool} is not "
            "known to be read-only. Try again later or ask the user."
        ),
        "metadata": {
            "retryable": True,
            "recorded": False,
            "replayed": False,
            "next_action": "retry_later",
        },
    }


def unreported(tool: str, outcome: str, call_id: str, idempotency_key: str) -> dict[str, Any]:
    """The outcome could not be reported within the lease: the ledger will treat the call as
    unknown, so the model hears the same."""
    ran = {
        "succeeded": f"{tool} reported success, but the ledger could not record it.",
        "failed": f"{tool} reported a failure, but the ledger could not record it.",
    }.get(outcome, f"{tool} was started and its outcome is unknown.")
    return {
        "ok": False,
        "code": "SIDE_EFFECT_UNCERTAIN",
        "content": f"{ran} It may have taken effect; do not retry it. Look it up by "
        "idempotency key or ask the user.",
        "metadata": {
            "call_id": call_id,
            "idempotency_key": idempotency_key,
            "recorded": False,
            "replayed": False,
            "retryable": False,
            "next_action": "lookup",
        },
    }


def forgotten(tool: str, call_id: str, idempotency_key: str) -> dict[str, Any]:
    """The ledger answered as if this runtime had never run the action, though it had: the
    ledger lost its record (a failover to a standby that lacked it). Not run again."""
    return {
        "ok": False,
        "code": "SIDE_EFFECT_UNCERTAIN",
        "content": f"{tool} was already run by this runtime under this idempotency key, and the "
        "ledger has lost its record of it, so it was NOT run again. It may have taken effect; "
        "do not retry it. Look it up by idempotency key or ask the user.",
        "metadata": {
            "call_id": call_id,
            "idempotency_key": idempotency_key,
            "recorded": False,
            "replayed": False,
            "retryable": False,
            "next_action": "lookup",
        },
    }


def start_refused(tool: str, problem: dict[str, Any]) -> dict[str, Any]:
    """The ledger refused to start an approved call: its input is not the approved action's
    (``IDEMPOTENCY_KEY_CONFLICT``), or the approval cannot be used. Nothing ran."""
    code = str(problem.get("code") or "HTTP_ERROR")
    return {
        "ok": False,
        "code": code,
        "content": f"{tool} was NOT executed: {problem.get('detail') or code}. An approval "
        "holds for the exact action it was given for; do not retry with other arguments, "
        "ask the user.",
        "metadata": {
            "recorded": False,
            "replayed": False,
            "retryable": False,
            "next_action": "stop",
        },
    }


def rejected_in_runtime(tool: str, reason: str) -> dict[str, Any]:
    """A person rejected the call in the agent framework's own approval UI: it was not run."""
    return {
        "ok": False,
        "code": "APPROVAL_REJECTED",
        "content": f"A human rejected running {tool}. It was NOT executed. Reason given: "
        f"{reason or 'no reason given'}",
        "metadata": {
            "recorded": False,
            "replayed": False,
            "retryable": False,
            "next_action": "stop",
        },
    }


def run_ended(problem: dict[str, Any]) -> dict[str, Any]:
    """The ledger refused a call because its run has ended (``RUN_FINISHED``, ``RUN_HALTED``):
    the model hears the ledger's reason, and that nothing ran."""
    code = str(problem.get("code"))
    return {
        "ok": False,
        "code": code,
        "content": f"Nothing was executed: {problem.get('detail') or code}. This run takes no "
        "more actions; stop and tell the user (a new task needs a new run).",
        "metadata": {
            "recorded": False,
            "replayed": False,
            "retryable": False,
            "next_action": "stop",
        },
    }


def model_text(observation: dict[str, Any]) -> str:
    """What a framework hands the model: a success's own result (text as is, anything else as
    JSON), else the whole observation as JSON, which cannot be mistaken for success."""
    if observation.get("ok") and observation.get("code") is None:
        content = observation.get("content")
        return content if isinstance(content, str) else json.dumps(content, default=str)
    return json.dumps(observation, default=str)


def refused_request(tool: str, detail: str) -> dict[str, Any]:
    """The runtime's request cannot name an action (a malformed field of its own, not the
    model's arguments): nothing was recorded or run."""
    return {
        "ok": False,
        "code": "INVALID_INPUT",
        "content": f"{tool} was NOT executed: {detail}",
        "metadata": {
            "recorded": False,
            "replayed": False,
            "retryable": False,
            "next_action": "stop",
        },
    }
