"""The LangGraph adapter end to end, offline: a graph whose model is LangChain's own scripted
fake chat model, its tools in a ToolNode wrapped by the ledger, a live ledger server and the
sandbox downstreams."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition
from langgraph.types import Command

from agent_ledger_client import AsyncLedgerClient
from agent_ledger_client.integrations.langgraph import LedgerToolCalls
from ledger.models import IdempotencyRecord, Run
from sandbox.server import SandboxServer
from tests.client.agent_tools import flaky_write_tool, order_tool, status_tool
from tests.client.shadowing import candidate_in_shadow
from tests.client.test_seed_eval_cases import _approve_when_asked
from tests.sandbox_fixtures import arm

pytestmark = pytest.mark.django_db(transaction=True)


def _calls(*turns: list[dict[str, Any]] | str) -> Iterator[AIMessage]:
    for turn in turns:
        if isinstance(turn, str):
            yield AIMessage(content=turn)
        else:
            yield AIMessage(content="", tool_calls=turn)


def _graph(model: GenericFakeChatModel, tools: list[Any], calls: LedgerToolCalls) -> Any:
    def agent(state: MessagesState) -> dict[str, Any]:
        return {"messages": [model.invoke(state["messages"])]}

    graph = StateGraph(MessagesState)
    graph.add_node("agent", agent)
    graph.add_node("tools", ToolNode(tools, awrap_tool_call=calls))
    graph.add_edge(START, "agent")
    graph.add_conditional_edges("agent", tools_condition)
    graph.add_edge("tools", "agent")
    return graph.compile(checkpointer=InMemorySaver())


def _tool_messages(state: dict[str, Any]) -> list[ToolMessage]:
    return [m for m in state["messages"] if isinstance(m, ToolMessage)]


def test_a_lost_order_retried_by_the_model_runs_once(
    live_server, ledger_token: str, sandbox: SandboxServer
) -> None:
    create_order = tool(order_tool(sandbox))
    order = {"name": "create_order", "args": {"cart": "cart-9"}}
    model = GenericFakeChatModel(
        messages=_calls(
            [{**order, "id": "tc-1"}], [{**order, "id": "tc-2"}], "I will ask the user."
        )
    )
    arm(sandbox, service="orders", mode="timeout_after_commit", hang_seconds=2)
    config = {"configurable": {"thread_id": "thread-1"}}

    async def scenario() -> dict[str, Any]:
        async with AsyncLedgerClient(live_server.url, ledger_token) as ledger:
            await ledger.register_tool("create_order", key_fields=["cart"])
            calls = LedgerToolCalls(ledger, user_id="u1")
            graph = _graph(model, [create_order], calls)
            state = await graph.ainvoke({"messages": [HumanMessage("order cart-9")]}, config)
            await calls.finish(config)
            return state

    state = asyncio.run(scenario())
    first, retry = _tool_messages(state)
    assert '"SIDE_EFFECT_UNCERTAIN"' in str(first.content) and first.status == "error"
    assert '"SIDE_EFFECT_UNCERTAIN"' in str(retry.content)
    assert state["messages"][-1].content == "I will ask the user."  # the model saw both
    assert httpx.get(f"{sandbox.url}/orders/stats").json()["objects"] == 1
    run = Run.objects.get(run_id="thread-1")
    assert run.status == "finished" and run.termination_reason == "completed"
    record = IdempotencyRecord.objects.get()
    assert (record.executions, record.duplicate_hits) == (1, 1)


@pytest.mark.parametrize("approve", [True, False], ids=["approved", "rejected"])
def test_an_approval_interrupts_the_graph_and_resumes_with_the_decision(
    approve: bool, live_server, ledger_token: str, sandbox: SandboxServer
) -> None:
    attempts: list[str] = []
    write_file = tool(flaky_write_tool(sandbox, attempts))
    write = {"name": "write_file", "args": {"path": "app.py", "content": "new"}}
    model = GenericFakeChatModel(
        messages=_calls([{**write, "id": "tc-1"}], [{**write, "id": "tc-2"}], "Done.")
    )
    config = {"configurable": {"thread_id": "thread-2"}}

    async def scenario() -> tuple[dict[str, Any], dict[str, Any]]:
        async with AsyncLedgerClient(live_server.url, ledger_token) as ledger:
            await ledger.register_tool("write_file", key_fields=["path"])
            calls = LedgerToolCalls(ledger, user_id="u1")
            graph = _graph(model, [write_file], calls)
            paused = await graph.ainvoke({"messages": [HumanMessage("write app.py")]}, config)
            approver = _approve_when_asked(approve=approve)
            await asyncio.to_thread(approver.join, 15)
            resumed = await graph.ainvoke(Command(resume="decided"), config)
            await calls.finish(config)
            return paused, resumed

    paused, resumed = asyncio.run(scenario())
    (pending,) = paused["__interrupt__"]
    assert pending.value["ledger"]["code"] == "APPROVAL_REQUIRED"
    lost, decided = _tool_messages(resumed)
    assert '"SIDE_EFFECT_UNCERTAIN"' in str(lost.content)
    assert resumed["messages"][-1].content == "Done."
    written = httpx.get(f"{sandbox.url}/workspace/files/app.py")
    if approve:
        assert decided.content == "written" and decided.status == "success"
        assert written.json()["content"] == "new" and attempts == ["app.py", "app.py"]
    else:
        assert decided.status == "error" and decided.artifact["code"] == "APPROVAL_REJECTED"
        assert "not this file" in decided.artifact["content"]
        assert written.status_code == 404 and attempts == ["app.py"]


def test_a_mirrored_thread_reads_and_shows_the_model_the_dry_run(
    live_server, ledger_token: str, sandbox: SandboxServer
) -> None:
    candidate_in_shadow()
    reads: list[str] = []
    tools = [tool(order_tool(sandbox)), tool(status_tool(reads))]

    def model() -> GenericFakeChatModel:
        status = {"name": "get_order_status", "args": {"order": "o-1"}, "id": "tc-1"}
        order = {"name": "create_order", "args": {"cart": "cart-5"}, "id": "tc-2"}
        return GenericFakeChatModel(messages=_calls([status], [order], "Ordered."))

    async def scenario() -> dict[str, Any]:
        async with AsyncLedgerClient(live_server.url, ledger_token) as ledger:
            await ledger.register_tool("create_order", key_fields=["cart"])
            live_calls = LedgerToolCalls(ledger, user_id="u1")
            live = {"configurable": {"thread_id": "thread-live"}}
            await _graph(model(), tools, live_calls).ainvoke(
                {"messages": [HumanMessage("go")]}, live
            )
            mirror = (await live_calls.run_for("thread-live")).mirror
            await live_calls.finish(live)
            assert mirror is not None
            calls = LedgerToolCalls(ledger, user_id="u1", mirror=mirror)
            config = {"configurable": {"thread_id": mirror.run_id}}
            state = await _graph(model(), tools, calls).ainvoke(
                {"messages": [HumanMessage("go")]}, config
            )
            await calls.finish(config)
            return state

    state = asyncio.run(scenario())
    read, dry = _tool_messages(state)
    assert read.content == "o-1 is pending" and reads == ["o-1", "o-1"]  # live and shadow
    assert '"SHADOW_DRY_RUN"' in str(dry.content) and dry.status == "error"
    assert state["messages"][-1].content == "Ordered."  # the model went on after seeing it
    assert httpx.get(f"{sandbox.url}/orders/stats").json()["objects"] == 1  # the live run's
    shadow = Run.objects.get(run_id="thread-live.shadow")
    assert shadow.shadow_of is not None and shadow.shadow_of.run_id == "thread-live"
    assert shadow.status == "finished"
