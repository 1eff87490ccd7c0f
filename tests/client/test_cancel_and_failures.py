"""How a call that did not finish normally is reported: a cancelled asyncio task is uncertain
at once (the retry is refused, not left waiting for the lease), an exception raised before the
side effect started is a plain failure, anything else is uncertain."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from agent_ledger_client import AsyncLedgerClient, CallContext, InvalidToolInput
from ledger.models import IdempotencyRecord

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_cancelled_call_is_unknown_within_a_heartbeat_and_its_retry_uncertain(
    live_server, ledger_token: str, settings
) -> None:
    # A three-second lease: the client heartbeats every second, and a call left executing
    # would still hold its key when the retry below comes (it waits one second at most).
    settings.LEDGER_LEASE_SECONDS = 3
    heartbeat_interval = settings.LEDGER_LEASE_SECONDS / 3
    executions = 0

    async def create_order(ctx: CallContext) -> dict[str, Any]:
        nonlocal executions
        executions += 1
        started.set()
        await asyncio.Event().wait()  # the downstream never answers
        return {}

    async def scenario() -> tuple[str, float, dict[str, Any]]:
        async with (
            AsyncLedgerClient(live_server.url, ledger_token) as ledger,
            ledger.run(user_id="u1") as run,
        ):
            task = asyncio.create_task(
                run.call("create_order", {"cart": "c-1"}, execute=create_order)
            )
            await started.wait()
            cancelled_at = time.monotonic()
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            state = (await asyncio.to_thread(IdempotencyRecord.objects.get)).state
            reported_after = time.monotonic() - cancelled_at
            retry = await run.call(
                "create_order", {"cart": "c-1"}, execute=create_order, wait_deadline=1
            )
            return state, reported_after, retry

    started = asyncio.Event()
    state, reported_after, retry = asyncio.run(scenario())
    assert state == "unknown"  # reported by the cancelled call itself, not by a lease sweep
    assert reported_after < heartbeat_interval
    assert retry["code"] == "SIDE_EFFECT_UNCERTAIN" and retry["metadata"]["replayed"] is False
    assert executions == 1


def test_invalid_input_raised_before_the_side_effect_is_a_failure(client: Any) -> None:
    def create_order(ctx: CallContext) -> dict[str, Any]:
        if "cart" not in ctx.input:
            raise InvalidToolInput("cart is required")
        return {"order": "o-1"}

    with client.run(user_id="u1") as run:
        observation = run.call("create_order", {"basket": "c-1"}, execute=create_order)
    assert observation["ok"] is False and observation["code"] == "INVALID_TOOL_INPUT"
    assert "cart is required" in observation["content"]
    record = IdempotencyRecord.objects.get()
    assert (record.state, record.error_retryable) == ("failed_final", True)


def test_any_other_exception_is_uncertain(client: Any) -> None:
    def create_order(ctx: CallContext) -> dict[str, Any]:
        raise RuntimeError("the tool crashed half-way")

    with client.run(user_id="u1") as run:
        observation = run.call("create_order", {"cart": "c-1"}, execute=create_order)
    assert observation["code"] == "SIDE_EFFECT_UNCERTAIN"
    assert IdempotencyRecord.objects.get().state == "unknown"
