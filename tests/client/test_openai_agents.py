"""The OpenAI Agents SDK adapter end to end, offline: an agent whose model is the SDK's own
ScriptedModel, its function tools wrapped by the ledger, a live ledger and the sandbox."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import pytest
from agents import Agent, Runner, function_tool
from agents.testing import ScriptedModel, assistant_message, function_call

from agent_ledger_client import AsyncLedgerClient
from agent_ledger_client.integrations.openai_agents import LedgerFunctionTools
from ledger.models import IdempotencyRecord, Run
from sandbox.server import SandboxServer
from tests.client.agent_tools import order_tool
from tests.sandbox_fixtures import arm

pytestmark = pytest.mark.django_db(transaction=True)


def _tool_outputs(result: Any) -> list[str]:
    return [item.output for item in result.new_items if item.type == "tool_call_output_item"]


def test_a_lost_order_retried_by_the_model_runs_once(
    live_server, ledger_token: str, sandbox: SandboxServer
) -> None:
    create_order = function_tool(order_tool(sandbox))
    order = {"cart": "cart-9"}
    model = ScriptedModel(
        [
            [function_call("create_order", order, call_id="call-1")],
            [function_call("create_order", order, call_id="call-2")],
            [assistant_message("I will ask the user.")],
        ]
    )
    arm(sandbox, service="orders", mode="timeout_after_commit", hang_seconds=2)

    async def scenario() -> Any:
        async with AsyncLedgerClient(live_server.url, ledger_token) as ledger:
            await ledger.register_tool("create_order", key_fields=["cart"])
            tools = LedgerFunctionTools(ledger, user_id="u1", run_id="conv-1")
            agent = Agent(name="shop", model=model, tools=tools.wrap([create_order]))
            result = await Runner.run(agent, "order cart-9")
            await tools.finish()
            return result

    result = asyncio.run(scenario())
    first, retry = (json.loads(output) for output in _tool_outputs(result))
    assert first["code"] == retry["code"] == "SIDE_EFFECT_UNCERTAIN"
    assert result.final_output == "I will ask the user."
    assert httpx.get(f"{sandbox.url}/orders/stats").json()["objects"] == 1
    assert Run.objects.get(run_id="conv-1").status == "finished"
    record = IdempotencyRecord.objects.get()
    assert (record.executions, record.duplicate_hits) == (1, 1)
    assert record.key.endswith(":create_order:cart=cart-9")


def test_arguments_that_are_not_an_object_fail_without_side_effect(
    live_server, ledger_token: str
) -> None:
    ran: list[str] = []

    @function_tool
    def create_order(cart: str) -> str:
        """Create an order for a cart."""
        ran.append(cart)
        return "o-1"

    model = ScriptedModel(
        [[function_call("create_order", "[1, 2]", call_id="call-1")], [assistant_message("ok")]]
    )

    async def scenario() -> Any:
        async with AsyncLedgerClient(live_server.url, ledger_token) as ledger:
            tools = LedgerFunctionTools(ledger, user_id="u1", run_id="conv-2")
            agent = Agent(name="shop", model=model, tools=tools.wrap([create_order]))
            result = await Runner.run(agent, "order")
            await tools.finish()
            return result

    result = asyncio.run(scenario())
    (output,) = _tool_outputs(result)
    assert json.loads(output)["code"] == "INVALID_TOOL_INPUT" and ran == []
    record = IdempotencyRecord.objects.get()
    assert (record.state, record.error_retryable) == ("failed_final", True)
