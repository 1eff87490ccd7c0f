"""The Pydantic AI adapter end to end, offline: an agent whose model is Pydantic AI's own
scripted FunctionModel, its tools in a LedgerToolset, a live ledger and the sandbox."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest
from pydantic_ai import Agent, DeferredToolRequests, DeferredToolResults
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.toolsets import FunctionToolset

from agent_ledger_client import AsyncLedgerClient
from agent_ledger_client.integrations.pydantic_ai import LedgerToolset
from ledger.models import IdempotencyRecord, Run
from sandbox.server import SandboxServer
from tests.client.agent_tools import flaky_write_tool, order_tool, status_tool
from tests.client.shadowing import candidate_in_shadow
from tests.client.test_seed_eval_cases import _approve_when_asked
from tests.sandbox_fixtures import arm

pytestmark = pytest.mark.django_db(transaction=True)


def _scripted(*turns: tuple[str, dict[str, Any], str] | str) -> FunctionModel:
    """A model that makes the given tool calls (name, args, tool-call id), one per turn."""
    script = iter(turns)

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        turn = next(script)
        if isinstance(turn, str):
            return ModelResponse(parts=[TextPart(turn)])
        name, args, call_id = turn
        return ModelResponse(parts=[ToolCallPart(name, args, tool_call_id=call_id)])

    return FunctionModel(respond)


def _returns(messages: list[ModelMessage]) -> list[Any]:
    return [
        part.content
        for message in messages
        for part in getattr(message, "parts", [])
        if isinstance(part, ToolReturnPart)
    ]


def test_a_lost_order_retried_by_the_model_runs_once(
    live_server, ledger_token: str, sandbox: SandboxServer
) -> None:
    create_order = order_tool(sandbox)
    order = {"cart": "cart-9"}
    model = _scripted(
        ("create_order", order, "tc-1"), ("create_order", order, "tc-2"), "I will ask the user."
    )
    arm(sandbox, service="orders", mode="timeout_after_commit", hang_seconds=2)

    async def scenario() -> Any:
        async with AsyncLedgerClient(live_server.url, ledger_token) as ledger:
            await ledger.register_tool("create_order", key_fields=["cart"])
            toolset = LedgerToolset(
                FunctionToolset([create_order]), ledger=ledger, user_id="u1", run_id="conv-1"
            )
            result = await Agent(model, toolsets=[toolset]).run("order cart-9")
            await toolset.finish()
            return result

    result = asyncio.run(scenario())
    first, retry = _returns(result.all_messages())
    assert first["code"] == retry["code"] == "SIDE_EFFECT_UNCERTAIN"
    assert result.output == "I will ask the user."
    assert httpx.get(f"{sandbox.url}/orders/stats").json()["objects"] == 1
    assert Run.objects.get(run_id="conv-1").status == "finished"
    assert IdempotencyRecord.objects.get().executions == 1


@pytest.mark.parametrize("approve", [True, False], ids=["approved", "rejected"])
def test_an_approval_is_a_deferred_call_that_resumes_with_the_decision(
    approve: bool, live_server, ledger_token: str, sandbox: SandboxServer
) -> None:
    attempts: list[str] = []
    write_file = flaky_write_tool(sandbox, attempts)
    write = {"path": "app.py", "content": "new"}
    model = _scripted(("write_file", write, "tc-1"), ("write_file", write, "tc-2"), "Done.")

    async def scenario() -> tuple[Any, Any]:
        async with AsyncLedgerClient(live_server.url, ledger_token) as ledger:
            await ledger.register_tool("write_file", key_fields=["path"])
            toolset = LedgerToolset(
                FunctionToolset([write_file]), ledger=ledger, user_id="u1", run_id="conv-2"
            )
            agent = Agent(model, toolsets=[toolset], output_type=[str, DeferredToolRequests])
            paused = await agent.run("write app.py")
            approver = _approve_when_asked(approve=approve)
            await asyncio.to_thread(approver.join, 15)
            approvals = DeferredToolResults(
                approvals={call.tool_call_id: True for call in paused.output.approvals}
            )
            resumed = await agent.run(
                message_history=paused.all_messages(), deferred_tool_results=approvals
            )
            await toolset.finish()
            return paused, resumed

    paused, resumed = asyncio.run(scenario())
    assert isinstance(paused.output, DeferredToolRequests)
    (asked,) = paused.output.approvals
    assert asked.tool_call_id == "tc-2"
    assert paused.output.metadata["tc-2"]["ledger"]["code"] == "APPROVAL_REQUIRED"
    lost, decided = _returns(resumed.all_messages())
    assert lost["code"] == "SIDE_EFFECT_UNCERTAIN" and resumed.output == "Done."
    written = httpx.get(f"{sandbox.url}/workspace/files/app.py")
    if approve:
        assert decided == "written" and written.json()["content"] == "new"
        assert attempts == ["app.py", "app.py"]
    else:
        assert decided["code"] == "APPROVAL_REJECTED" and "not this file" in decided["content"]
        assert written.status_code == 404 and attempts == ["app.py"]


def test_a_mirrored_run_reads_and_shows_the_model_the_dry_run(
    live_server, ledger_token: str, sandbox: SandboxServer
) -> None:
    candidate_in_shadow()
    reads: list[str] = []
    model = _scripted(
        ("get_order_status", {"order": "o-1"}, "tc-1"),
        ("create_order", {"cart": "cart-5"}, "tc-2"),
        "Ordered.",
    )

    async def scenario() -> Any:
        async with AsyncLedgerClient(live_server.url, ledger_token) as ledger:
            await ledger.register_tool("create_order", key_fields=["cart"])
            live = await ledger.start_run(user_id="u1", run_id="conv-live")
            toolset = LedgerToolset(
                FunctionToolset([order_tool(sandbox), status_tool(reads)]),
                ledger=ledger,
                user_id="u1",
                mirror=live.mirror,
            )
            result = await Agent(model, toolsets=[toolset]).run("order cart-5")
            await toolset.finish()
            return result

    result = asyncio.run(scenario())
    read, dry = _returns(result.all_messages())
    assert read == "o-1 is pending" and reads == ["o-1"]
    assert dry["code"] == "SHADOW_DRY_RUN"
    assert result.output == "Ordered."  # the model went on after seeing it
    assert httpx.get(f"{sandbox.url}/orders/stats").json()["objects"] == 0
    shadow = Run.objects.get(run_id="conv-live.shadow")
    assert shadow.shadow_of is not None and shadow.shadow_of.run_id == "conv-live"
    assert shadow.status == "finished"
