"""The LangGraph adapter end to end, offline: a graph whose model is LangChain's own scripted
fake chat model, its tools in a ToolNode wrapped by the ledger, a live ledger server and the
sandbox downstreams."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from django.db import connection
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition
from langgraph.store.postgres.aio import AsyncPostgresStore
from langgraph.types import Command
from psycopg.conninfo import make_conninfo

from agent_ledger_client import AsyncLedgerClient, LedgerClient, ToolError
from agent_ledger_client.integrations.langgraph import LedgerToolCalls
from ledger.models import ApprovalRequest, IdempotencyRecord, Run
from sandbox.server import SandboxServer
from tests.client import graph_process
from tests.client.agent_tools import amount_order_tool, flaky_write_tool, order_tool, status_tool
from tests.client.approving import Approver, approver_token, large_orders_policy, orders
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


def _graph(
    model: GenericFakeChatModel, tools: list[Any], calls: LedgerToolCalls, **node: Any
) -> Any:
    def agent(state: MessagesState) -> dict[str, Any]:
        return {"messages": [model.invoke(state["messages"])]}

    graph = StateGraph(MessagesState)
    graph.add_node("agent", agent)
    graph.add_node("tools", ToolNode(tools, awrap_tool_call=calls, **node))
    graph.add_edge(START, "agent")
    graph.add_conditional_edges("agent", tools_condition)
    graph.add_edge("tools", "agent")
    return graph.compile(checkpointer=InMemorySaver())


def _tool_messages(state: dict[str, Any]) -> list[ToolMessage]:
    return [m for m in state["messages"] if isinstance(m, ToolMessage)]


def _asks_to_fix_its_input(messages: list[ToolMessage]) -> bool:
    return any("fix" in str(message.content).lower() for message in messages)


@pytest.mark.parametrize("handled", [True, False], ids=["handle_tool_errors", "default"])
def test_a_lost_order_re_planned_by_the_model_runs_once_and_is_uncertain(
    handled: bool, live_server, ledger_token: str, sandbox: SandboxServer
) -> None:
    """The ToolNode's own error handling (``handle_tool_errors=True`` turns every exception into
    "Please fix your mistakes") does not make a lost response a failure: the call is uncertain
    and the model is never told to fix its input. No key fields: the re-planned call (a new
    tool-call id, the same arguments) is the same action by the ledger's own keying."""
    create_order = tool(order_tool(sandbox))
    order = {"name": "create_order", "args": {"cart": "cart-9"}}
    model = GenericFakeChatModel(
        messages=_calls(
            [{**order, "id": "tc-1"}], [{**order, "id": "tc-2"}], "I will ask the user."
        )
    )
    arm(sandbox, service="orders", mode="timeout_after_commit", hang_seconds=2)
    config = {"configurable": {"thread_id": "thread-1"}}
    node = {"handle_tool_errors": True} if handled else {}

    async def scenario() -> dict[str, Any]:
        async with AsyncLedgerClient(live_server.url, ledger_token) as ledger:
            calls = LedgerToolCalls(ledger, user_id="u1")
            graph = _graph(model, [create_order], calls, **node)
            state = await graph.ainvoke({"messages": [HumanMessage("order cart-9")]}, config)
            await calls.finish(config)
            return state

    state = asyncio.run(scenario())
    first, retry = _tool_messages(state)
    assert first.artifact["code"] == "SIDE_EFFECT_UNCERTAIN" and first.status == "error"
    assert retry.artifact["code"] == "SIDE_EFFECT_UNCERTAIN"
    assert not _asks_to_fix_its_input([first, retry])
    assert state["messages"][-1].content == "I will ask the user."  # the model saw both
    assert httpx.get(f"{sandbox.url}/orders/stats").json()["objects"] == 1
    run = Run.objects.get(run_id="thread-1")
    assert run.status == "finished" and run.termination_reason == "completed"
    record = IdempotencyRecord.objects.get()
    assert (record.state, record.executions, record.duplicate_hits) == ("unknown", 1, 1)


@pytest.mark.parametrize("handled", [True, False], ids=["handle_tool_errors", "default"])
def test_a_lost_order_re_sent_under_its_own_tool_call_id_runs_once_and_is_uncertain(
    handled: bool, live_server, ledger_token: str, sandbox: SandboxServer
) -> None:
    """Retry shape (a): the response lost after the order was made, the same tool call (its id
    too) is sent again, as when the tools node runs again. One order at the sandbox, and the
    model is told ``SIDE_EFFECT_UNCERTAIN`` both times, never to fix its input."""
    create_order = tool(order_tool(sandbox))
    order = {"name": "create_order", "args": {"cart": "cart-9"}, "id": "tc-1"}
    model = GenericFakeChatModel(messages=_calls([order], [order], "I will ask the user."))
    arm(sandbox, service="orders", mode="timeout_after_commit", hang_seconds=2)
    config = {"configurable": {"thread_id": "thread-1"}}
    node = {"handle_tool_errors": True} if handled else {}

    async def scenario() -> dict[str, Any]:
        async with AsyncLedgerClient(live_server.url, ledger_token) as ledger:
            calls = LedgerToolCalls(ledger, user_id="u1")
            graph = _graph(model, [create_order], calls, **node)
            state = await graph.ainvoke({"messages": [HumanMessage("order cart-9")]}, config)
            await calls.finish(config)
            return state

    state = asyncio.run(scenario())
    first, again = _tool_messages(state)
    assert first.tool_call_id == again.tool_call_id == "tc-1"
    assert first.artifact["code"] == again.artifact["code"] == "SIDE_EFFECT_UNCERTAIN"
    assert first.status == again.status == "error"
    assert not _asks_to_fix_its_input([first, again])
    assert state["messages"][-1].content == "I will ask the user."
    assert httpx.get(f"{sandbox.url}/orders/stats").json()["objects"] == 1


def test_a_re_planned_order_gets_the_recorded_result(
    live_server, ledger_token: str, sandbox: SandboxServer
) -> None:
    create_order = tool(order_tool(sandbox))
    order = {"name": "create_order", "args": {"cart": "cart-9"}}
    model = GenericFakeChatModel(
        messages=_calls([{**order, "id": "tc-1"}], [{**order, "id": "tc-2"}], "Ordered.")
    )
    config = {"configurable": {"thread_id": "thread-1"}}

    async def scenario() -> dict[str, Any]:
        async with AsyncLedgerClient(live_server.url, ledger_token) as ledger:
            calls = LedgerToolCalls(ledger, user_id="u1")
            graph = _graph(model, [create_order], calls, handle_tool_errors=True)
            state = await graph.ainvoke({"messages": [HumanMessage("order cart-9")]}, config)
            await calls.finish(config)
            return state

    first, again = _tool_messages(asyncio.run(scenario()))
    assert first.status == again.status == "success" and again.content == first.content
    assert again.artifact["metadata"]["replayed"] is True
    assert httpx.get(f"{sandbox.url}/orders/stats").json()["objects"] == 1


def test_a_tool_error_through_the_nodes_error_handling_is_still_the_tools_failure(
    live_server, ledger_token: str
) -> None:
    @tool
    def create_order(cart: str) -> str:
        """Create an order for a cart."""
        raise ToolError("OUT_OF_STOCK", f"{cart} has nothing in stock")

    order = {"name": "create_order", "args": {"cart": "cart-9"}, "id": "tc-1"}
    model = GenericFakeChatModel(messages=_calls([order], "Sorry."))
    config = {"configurable": {"thread_id": "thread-1"}}

    async def scenario() -> dict[str, Any]:
        async with AsyncLedgerClient(live_server.url, ledger_token) as ledger:
            calls = LedgerToolCalls(ledger, user_id="u1")
            graph = _graph(model, [create_order], calls, handle_tool_errors=True)
            return await graph.ainvoke({"messages": [HumanMessage("order cart-9")]}, config)

    (failed,) = _tool_messages(asyncio.run(scenario()))
    assert failed.artifact["code"] == "OUT_OF_STOCK" and failed.status == "error"
    record = IdempotencyRecord.objects.get()
    assert (record.state, record.error_retryable) == ("failed_final", False)


def test_arguments_the_schema_refuses_fail_without_running(live_server, ledger_token: str) -> None:
    ran: list[str] = []

    @tool
    def create_order(cart: str) -> str:
        """Create an order for a cart."""
        ran.append(cart)
        return "o-1"

    order = {"name": "create_order", "args": {"basket": "cart-9"}, "id": "tc-1"}
    model = GenericFakeChatModel(messages=_calls([order], "Sorry."))
    config = {"configurable": {"thread_id": "thread-1"}}

    async def scenario() -> dict[str, Any]:
        async with AsyncLedgerClient(live_server.url, ledger_token) as ledger:
            calls = LedgerToolCalls(ledger, user_id="u1")
            graph = _graph(model, [create_order], calls, handle_tool_errors=True)
            return await graph.ainvoke({"messages": [HumanMessage("order cart-9")]}, config)

    (refused,) = _tool_messages(asyncio.run(scenario()))
    assert refused.artifact["code"] == "INVALID_TOOL_INPUT" and ran == []
    assert "cart" in refused.artifact["content"]
    record = IdempotencyRecord.objects.get()
    assert (record.state, record.error_retryable) == ("failed_final", True)


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


def _orders_graph(
    live_server: Any, token: str, sandbox: SandboxServer, *, approver: str | None = None
) -> tuple[Any, LedgerToolCalls, AsyncLedgerClient, LedgerClient | None]:
    """A graph whose model orders 50, then 500, then says "Done.", under the policy "approve
    create_order when amount > 100"; ``approver``: a person's token for the adapter."""
    large_orders_policy(live_server.url, token)
    ledger = AsyncLedgerClient(live_server.url, token)
    person = LedgerClient(live_server.url, approver) if approver else None
    calls = LedgerToolCalls(ledger, user_id="u1", approver=person, approval_wait=15)
    small = {"name": "create_order", "args": {"amount": 50}, "id": "tc-1"}
    large = {"name": "create_order", "args": {"amount": 500}, "id": "tc-2"}
    model = GenericFakeChatModel(messages=_calls([small], [large], "Done."))
    graph = _graph(model, [tool(amount_order_tool(sandbox))], calls)
    return graph, calls, ledger, person


@pytest.mark.parametrize("approve", [True, False], ids=["approved", "rejected"])
def test_a_policy_pauses_a_large_order_with_langgraphs_interrupt(
    approve: bool, live_server, ledger_token: str, sandbox: SandboxServer
) -> None:
    """A small order runs at once; a large one interrupts the graph with the ledger's approval
    id; the approver's decision, given as the resume value, reaches the ledger through the
    approver's client: approved, the order runs once; rejected, never, and the model is told
    why."""
    graph, calls, ledger, person = _orders_graph(
        live_server, ledger_token, sandbox, approver=approver_token()
    )
    config = {"configurable": {"thread_id": "thread-3"}}
    decision = {"approve": approve, "reason": "customer asked to wait"}

    async def scenario() -> tuple[dict[str, Any], dict[str, int], dict[str, Any]]:
        paused = await graph.ainvoke({"messages": [HumanMessage("order")]}, config)
        before = orders(sandbox)
        resumed = await graph.ainvoke(Command(resume=decision), config)
        await calls.finish(config)
        await ledger.aclose()
        return paused, before, resumed

    paused, before, resumed = asyncio.run(scenario())
    assert person is not None
    person.close()
    (pending,) = paused["__interrupt__"]
    held = pending.value["ledger"]
    assert held["code"] == "APPROVAL_REQUIRED" and "second look" in held["content"]
    request = ApprovalRequest.objects.get()
    assert held["metadata"]["approval_id"] == request.pk
    assert before == {"amount-50": 1}  # the small one ran at once; the large one waits
    small, large = _tool_messages(resumed)
    assert small.status == "success" and resumed["messages"][-1].content == "Done."
    if approve:
        assert large.status == "success" and request.state == "consumed"
        assert orders(sandbox) == {"amount-50": 1, "amount-500": 1}
    else:
        assert large.artifact["code"] == "APPROVAL_REJECTED" and large.status == "error"
        assert "customer asked to wait" in large.artifact["content"]
        assert request.state == "rejected" and request.decision_reason == "customer asked to wait"
        assert orders(sandbox) == {"amount-50": 1}


def test_a_paused_order_runs_once_a_person_approved_it_in_the_ledger(
    live_server, ledger_token: str, sandbox: SandboxServer
) -> None:
    """Without an approver client, a person approves through the approvals API and the graph
    is resumed with no decision of its own."""
    graph, calls, ledger, _ = _orders_graph(live_server, ledger_token, sandbox)
    person = approver_token()  # out of the event loop: its context would open a connection
    config = {"configurable": {"thread_id": "thread-4"}}

    async def scenario() -> dict[str, Any]:
        await graph.ainvoke({"messages": [HumanMessage("order")]}, config)
        approver = Approver(live_server.url, person, approve=True)
        approver.start()
        resumed = await graph.ainvoke(Command(resume="decided in the console"), config)
        await asyncio.to_thread(approver.join, 20)
        await calls.finish(config)
        await ledger.aclose()
        return resumed

    _small, large = _tool_messages(asyncio.run(scenario()))
    assert large.status == "success", large.artifact
    assert orders(sandbox) == {"amount-50": 1, "amount-500": 1}


def test_an_order_edited_while_the_graph_waited_runs_nothing(
    live_server, ledger_token: str, sandbox: SandboxServer
) -> None:
    """The approval is for the action shown: the tool call edited to 5000 in the paused
    graph's state and resumed as approved is refused by the ledger (422), and the model is
    told; neither amount is ordered."""
    graph, calls, ledger, person = _orders_graph(
        live_server, ledger_token, sandbox, approver=approver_token()
    )
    config = {"configurable": {"thread_id": "thread-5"}}

    async def scenario() -> dict[str, Any]:
        await graph.ainvoke({"messages": [HumanMessage("order")]}, config)
        asked = (await graph.aget_state(config)).values["messages"][-1]
        edited = {"name": "create_order", "args": {"amount": 5000}, "id": "tc-2"}
        await graph.aupdate_state(
            config, {"messages": [AIMessage("", id=asked.id, tool_calls=[edited])]}
        )
        resumed = await graph.ainvoke(Command(resume={"approve": True}), config)
        await calls.finish(config)
        await ledger.aclose()
        return resumed

    resumed = asyncio.run(scenario())
    assert person is not None
    person.close()
    _small, refused = _tool_messages(resumed)
    assert refused.artifact["code"] == "IDEMPOTENCY_KEY_CONFLICT" and refused.status == "error"
    assert "NOT executed" in refused.artifact["content"]
    assert orders(sandbox) == {"amount-50": 1}


def _graph_database(schema: str) -> str:
    """The test database, with ``schema`` for LangGraph's own tables (checkpoints, store)."""
    settings = connection.settings_dict
    with connection.cursor() as cursor:
        cursor.execute(f"CREATE SCHEMA IF NOT EXISTS {schema}")
    return make_conninfo(
        dbname=settings["NAME"],
        user=settings["USER"] or None,
        password=settings["PASSWORD"] or None,
        host=settings["HOST"] or None,
        port=str(settings["PORT"] or "") or None,
        options=f"-csearch_path={schema}",
    )


def test_a_thread_resumed_after_its_process_was_killed_hears_uncertain_at_once(
    live_server, ledger_token: str, sandbox: SandboxServer
) -> None:
    """A graph process killed (-9) while its order's answer is lost leaves the call executing
    under its lease (60 s). Resumed in another process from the same checkpointer and store,
    the thread reports that call uncertain at once, and the model is told so: one order."""
    arm(sandbox, service="orders", mode="timeout_after_commit", hang_seconds=60)
    database = _graph_database("graph_killed")
    environment = {
        **os.environ,
        "LEDGER_URL": live_server.url,
        "LEDGER_TOKEN": ledger_token,
        "SANDBOX_URL": sandbox.url,
        "GRAPH_DB": database,
    }
    child = subprocess.Popen([sys.executable, graph_process.__file__], env=environment)

    async def resume() -> dict[str, Any]:
        async with (
            AsyncPostgresSaver.from_conn_string(database) as saver,
            AsyncPostgresStore.from_conn_string(database) as store,
            AsyncLedgerClient(live_server.url, ledger_token) as ledger,
        ):
            model = GenericFakeChatModel(messages=iter([AIMessage("I will ask the user.")]))
            calls = LedgerToolCalls(ledger, user_id="u1")
            app = graph_process.graph(model, calls, saver, store)
            state = await app.ainvoke(None, graph_process.THREAD)
            await calls.finish(graph_process.THREAD)
            return state

    try:
        deadline = time.monotonic() + 60
        while httpx.get(f"{sandbox.url}/orders/stats").json()["objects"] == 0:
            assert child.poll() is None and time.monotonic() < deadline, "the graph never ordered"
            time.sleep(0.1)
        os.kill(child.pid, signal.SIGKILL)
        child.wait(10)
        assert IdempotencyRecord.objects.get().state == "executing"
        started = time.monotonic()
        state = asyncio.run(resume())
        waited = time.monotonic() - started
    finally:
        if child.poll() is None:
            child.kill()
            child.wait(10)
        with connection.cursor() as cursor:
            cursor.execute("DROP SCHEMA graph_killed CASCADE")
    (lost,) = _tool_messages(state)
    assert lost.artifact["code"] == "SIDE_EFFECT_UNCERTAIN", lost.artifact
    assert waited < 15  # not the lease's 60 s
    assert state["messages"][-1].content == "I will ask the user."
    assert httpx.get(f"{sandbox.url}/orders/stats").json()["objects"] == 1
    assert IdempotencyRecord.objects.get().state == "unknown"
