"""What the framework adapters share about approvals: the framework's pause and the ledger's.

A call the ledger holds for a human (``APPROVAL_REQUIRED``: an approval policy, a replay only a
person may allow) pauses the agent with the framework's own pause, which carries the ledger's
observation (its ``metadata.approval_id`` and ``metadata.call_id``, the policy's reason). Both
gates must pass: a call the framework's approver rejects never runs, and a call it approves
runs once the ledger's approval is given too, started with the input the framework resumes
with (another input than the approved action's is refused by the ledger: nothing runs).

The decision made in the framework's UI reaches the ledger through an *approver client*: a
``LedgerClient`` or ``AsyncLedgerClient`` holding a person's token with the approver role. The
ledger refuses every principal of the action (the owner of the runtime's token, the person a
service account acts for), so it must be another person's. Without one, the ledger's approval
is decided in its console or approvals API, and the resumed call waits for it.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

from agent_ledger_client.aio import AsyncLedgerClient
from agent_ledger_client.client import LedgerClient
from agent_ledger_client.errors import LedgerRequestError
from agent_ledger_client.observations import normalised, rejected_in_runtime

#: A person's client (approver role), through which the framework's decisions reach the ledger.
Approver = LedgerClient | AsyncLedgerClient


@dataclass(frozen=True)
class Decision:
    """What a person decided in the framework's own approval UI."""

    approve: bool
    reason: str = ""


def is_held(observation: dict[str, Any]) -> bool:
    """Whether the ledger holds the call for a human (its observation says how to resume)."""
    return observation.get("code") == "APPROVAL_REQUIRED" and bool(
        observation.get("metadata", {}).get("call_id")
    )


def approval_id(held: dict[str, Any]) -> int | None:
    """The ledger's approval request a held call waits for."""
    value = held.get("metadata", {}).get("approval_id")
    return int(value) if value is not None else None


async def forward(approver: Approver | None, held: dict[str, Any], decision: Decision) -> None:
    """Decide the held call's approval in the ledger as the framework's approver did, through
    ``approver`` (nothing without one). An approval the ledger has already decided, or that
    expired, (409) is left as the ledger has it."""
    request = approval_id(held)
    if approver is None or request is None:
        return
    reason = decision.reason or ("approved in the agent's UI" if decision.approve else "")
    try:
        if isinstance(approver, AsyncLedgerClient):
            await approver.decide_approval(request, approve=decision.approve, reason=reason)
        else:
            await asyncio.to_thread(
                approver.decide_approval, request, approve=decision.approve, reason=reason
            )
    except LedgerRequestError as refused:
        if refused.status != 409:
            raise


async def approved(
    ledger: AsyncLedgerClient,
    held: dict[str, Any],
    *,
    tool_input: dict[str, Any],
    execute: Any,
    approver: Approver | None,
    wait: float,
    **options: Any,
) -> dict[str, Any]:
    """The observation for a held call the framework resumes as approved (``approver``: the
    client its approval is forwarded through; None leaves the decision to the ledger's
    approvers): it runs when the ledger shows it approved, waiting up to ``wait`` seconds,
    started with ``tool_input`` (refused, and not run, when it is not the approved action's)."""
    await forward(approver, held, Decision(True))
    call_id = str(held["metadata"]["call_id"])
    return await ledger.resume(
        call_id, tool_input, execute=execute, **{**options, "approval_deadline": wait}
    )


async def rejected(
    ledger: AsyncLedgerClient,
    held: dict[str, Any] | None,
    *,
    tool: str,
    reason: str,
    approver: Approver | None,
) -> dict[str, Any]:
    """The observation for a call rejected in the framework's UI, which never runs: the
    ledger's rejection (with ``reason``) once the approver client has made it, else one that
    says the framework's approver rejected it."""
    if held is not None:
        await forward(approver, held, Decision(False, reason))
        latest = await ledger.get_call(str(held["metadata"]["call_id"]))
        if latest.get("approval_state") == "rejected":
            return normalised(latest["observation"])
    return rejected_in_runtime(tool, reason)
