"""A model turn's parallel tool calls reach the ledger as one ``POST /calls/batch``: through the
asyncio client, and through each framework that runs a turn's calls together. Side effects are
counted in the sandbox's own state; requests by a transport that hands every request on to
the live ledger and notes what it was."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from typing import Any

import httpx
import pytest
from agents import Agent, Runner, function_tool, set_tracing_disabled
from agents.testing import ScriptedModel, assistant_message, function_call
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.tools import tool
from pydantic_ai import Agent as PydanticAgent
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.toolsets import FunctionToolset

from agent_ledger_client import AsyncLedgerClient
from agent_ledger_client.integrations.langgraph import LedgerToolCalls
from agent_ledger_client.integrations.openai_agents import LedgerFunctionTools
from agent_ledger_client.integrations.pydantic_ai import LedgerToolset
from agent_ledger_client.protocol import CallContext
from ledger.models import IdempotencyRecord
from sandbox.server import SandboxServer
from tests.client.agent_tools import order_tool
from tests.client.approving import orders
from tests.client.test_langgraph import _graph

pytestmark = pytest.mark.django_db(transaction=True)

CARTS = ["cart-1", "cart-2", "cart-3"]


class Noting(httpx.AsyncBaseTransport):
    """The network, noting each request's method, path and body; with ``without_batches`` it
    answers ``POST /calls/batch`` as a ledger without that route does (405), and nothing of it
    reaches the ledger."""

    def __init__(self, *, without_batches: bool = False) -> None:
        self.network = httpx.AsyncHTTPTransport()
        self.sent: list[tuple[str, str, Any, httpx.Headers]] = []
        self.without_batches = without_batches

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content) if request.content else None
        self.sent.append((request.method, request.url.path, body, request.headers))
        if self.without_batches and request.url.path.endswith("/calls/batch"):
            return httpx.Response(405, json={"detail": "Method not allowed"})
        return await self.network.handle_async_request(request)

    async def aclose(self) -> None:
        await self.network.aclose()

    def asked(self) -> list[list[str]]:
        """The steps of each request that asked about new calls: a batch's, or one alone."""
        asked = []
        for method, path, body, _headers in self.sent:
            if method == "POST" and path.endswith("/calls/batch"):
                asked.append([call["step_id"] for call in body["calls"]])
            elif method == "POST" and path.endswith("/calls"):
                asked.append([body["step_id"]])
        return asked


def _ordering(sandbox: SandboxServer) -> Callable[[CallContext], Awaitable[str]]:
    create_order = order_tool(sandbox, timeout=5)

    async def execute(call: CallContext) -> str:
        return await create_order(call.input["cart"])

    return execute


def test_calls_started_together_are_asked_about_in_one_batch(
    live_server, ledger_token: str, sandbox: SandboxServer
) -> None:
    """Four calls gathered at once, two of them the same action: one batch asks about all
    four; each action runs once at the sandbox, and the repeated one gets its result."""
    noting = Noting()
    execute = _ordering(sandbox)

    async def scenario() -> list[dict[str, Any]]:
        async with (
            AsyncLedgerClient(live_server.url, ledger_token, transport=noting) as ledger,
            ledger.run(user_id="u1", run_id="turn-1") as run,
        ):
            # The first use of the catalogue tool registers it; the turn comes after.
            await run.call("create_order", {"cart": "cart-0"}, execute=execute, step_id="s0")
            noting.sent.clear()
            return await asyncio.gather(
                *(
                    run.call("create_order", {"cart": cart}, execute=execute, step_id=f"s{n}")
                    for n, cart in enumerate([*CARTS, "cart-1"], start=1)
                )
            )

    answers = asyncio.run(scenario())
    assert noting.asked()[0] == ["s1", "s2", "s3", "s4"]
    assert orders(sandbox) == {"cart-0": 1, "cart-1": 1, "cart-2": 1, "cart-3": 1}
    assert answers[3]["content"] == answers[0]["content"] and answers[3]["metadata"]["replayed"]
    assert IdempotencyRecord.objects.filter(state="succeeded").count() == 4


def test_a_call_cancelled_before_its_turn_left_is_not_sent(
    live_server, ledger_token: str, sandbox: SandboxServer
) -> None:
    noting = Noting()
    execute = _ordering(sandbox)

    async def scenario() -> list[Any]:
        async with (
            AsyncLedgerClient(live_server.url, ledger_token, transport=noting) as ledger,
            ledger.run(user_id="u1", run_id="turn-1") as run,
        ):
            calls = [
                asyncio.create_task(
                    run.call("create_order", {"cart": cart}, execute=execute, step_id=f"s{n}")
                )
                for n, cart in enumerate(CARTS)
            ]
            await asyncio.sleep(0)  # each has asked; the turn leaves on the next pass
            calls[1].cancel()
            return await asyncio.gather(*calls, return_exceptions=True)

    first, cancelled, third = asyncio.run(scenario())
    assert isinstance(cancelled, asyncio.CancelledError)
    assert first["ok"] and third["ok"]
    assert noting.asked() == [["s0", "s2"]]
    assert orders(sandbox) == {"cart-1": 1, "cart-3": 1}
    assert IdempotencyRecord.objects.count() == 2


def test_calls_under_other_trace_contexts_and_a_body_that_cannot_be_sent_go_alone(
    live_server, ledger_token: str, sandbox: SandboxServer
) -> None:
    """Two of the calls under one span go together; one under its own span goes alone; one
    whose input is not JSON fails by itself, as it would alone, and nothing of it is sent."""
    noting = Noting()
    execute = _ordering(sandbox)
    spans = ["00-" + "a" * 32 + "-" + "1" * 16 + "-01", "00-" + "b" * 32 + "-" + "2" * 16 + "-01"]

    async def scenario() -> list[Any]:
        async with (
            AsyncLedgerClient(live_server.url, ledger_token, transport=noting) as ledger,
            ledger.run(user_id="u1", run_id="turn-1") as run,
        ):
            noting.sent.clear()
            calls = [
                run.call(
                    "create_order",
                    {"cart": cart},
                    execute=execute,
                    step_id=f"s{n}",
                    traceparent=span,
                )
                for n, (cart, span) in enumerate(
                    zip(CARTS, [spans[0], spans[1], spans[0]], strict=True)
                )
            ]
            broken = run.call("create_order", {"cart": {1, 2}}, execute=execute, step_id="s3")
            return await asyncio.gather(*calls, broken, return_exceptions=True)

    *answers, broken = asyncio.run(scenario())
    assert all(answer["ok"] for answer in answers)
    assert isinstance(broken, TypeError)
    assert sorted(noting.asked()) == [["s0", "s2"], ["s1"]]
    batch = next(headers for _m, path, _b, headers in noting.sent if path.endswith("/batch"))
    assert batch["traceparent"] == spans[0]
    assert orders(sandbox) == dict.fromkeys(CARTS, 1)


def test_runs_started_at_once_without_a_run_id_are_two_runs(live_server, ledger_token: str) -> None:
    async def scenario() -> set[str]:
        async with AsyncLedgerClient(live_server.url, ledger_token) as ledger:
            runs = await asyncio.gather(*(ledger.start_run(user_id="u1") for _ in range(2)))
            return {run.run_id for run in runs}

    assert len(asyncio.run(scenario())) == 2


def test_a_call_alone_is_asked_about_alone(
    live_server, ledger_token: str, sandbox: SandboxServer
) -> None:
    noting = Noting()

    async def scenario() -> None:
        async with (
            AsyncLedgerClient(live_server.url, ledger_token, transport=noting) as ledger,
            ledger.run(user_id="u1", run_id="turn-1") as run,
        ):
            for n, cart in enumerate(CARTS):
                await run.call(
                    "create_order", {"cart": cart}, execute=_ordering(sandbox), step_id=f"s{n}"
                )

    asyncio.run(scenario())
    assert noting.asked() == [["s0"], ["s1"], ["s2"]]
    assert not any(path.endswith("/calls/batch") for _method, path, _body, _headers in noting.sent)
    assert orders(sandbox) == dict.fromkeys(CARTS, 1)


def test_a_ledger_without_batches_gets_each_call_alone(
    live_server, ledger_token: str, sandbox: SandboxServer
) -> None:
    """An older ledger answers the batch 405: the turn's calls go one by one, each runs
    once, and the next turn does not try a batch again."""
    noting = Noting(without_batches=True)
    execute = _ordering(sandbox)

    async def turn(run: Any, carts: list[str], first: int) -> None:
        await asyncio.gather(
            *(
                run.call("create_order", {"cart": cart}, execute=execute, step_id=f"s{n}")
                for n, cart in enumerate(carts, start=first)
            )
        )

    async def scenario() -> None:
        async with (
            AsyncLedgerClient(live_server.url, ledger_token, transport=noting) as ledger,
            ledger.run(user_id="u1", run_id="turn-1") as run,
        ):
            await turn(run, CARTS[:2], 1)
            await turn(run, [*CARTS[2:], "cart-4"], 3)

    asyncio.run(scenario())
    batches = [path for _m, path, _b, _h in noting.sent if path.endswith("/calls/batch")]
    assert len(batches) == 1
    asked = sorted(map(tuple, noting.asked()))
    assert asked == sorted([("s1", "s2"), ("s1",), ("s2",), ("s3",), ("s4",)])
    assert orders(sandbox) == {**dict.fromkeys(CARTS, 1), "cart-4": 1}


def test_a_first_turn_starts_its_run_once_and_asks_in_one_batch(
    live_server, ledger_token: str, sandbox: SandboxServer
) -> None:
    """Each call of a run's first turn starts the run (as the adapters do): one start request
    for all of them, then one batch."""
    noting = Noting()
    execute = _ordering(sandbox)

    async def call(ledger: AsyncLedgerClient, n: int, cart: str) -> dict[str, Any]:
        run = await ledger.start_run(user_id="u1", run_id="turn-1")
        return await run.call("create_order", {"cart": cart}, execute=execute, step_id=f"s{n}")

    async def scenario() -> None:
        async with AsyncLedgerClient(live_server.url, ledger_token, transport=noting) as ledger:
            await ledger.register_tool("create_order")
            await asyncio.gather(*(call(ledger, n, cart) for n, cart in enumerate(CARTS)))

    asyncio.run(scenario())
    starts = [path for _method, path, _b, _h in noting.sent if path.endswith("/runs")]
    assert len(starts) == 1
    assert noting.asked() == [["s0", "s1", "s2"]]
    assert orders(sandbox) == dict.fromkeys(CARTS, 1)


# --- the frameworks: a model turn asking for three orders --------------------------------


# The model's two turns: three orders (the run not started yet), then two more.
TURNS = [CARTS, ["cart-4", "cart-5"]]


def _one_batch_a_turn(noting: Noting, sandbox: SandboxServer) -> None:
    assert [len(asked) for asked in noting.asked()] == [3, 2], noting.asked()
    assert orders(sandbox) == dict.fromkeys([cart for turn in TURNS for cart in turn], 1)


def test_an_openai_agents_turn_is_one_batch(
    live_server, ledger_token: str, sandbox: SandboxServer
) -> None:
    set_tracing_disabled(True)
    noting = Noting()
    model = ScriptedModel(
        [
            *(
                [function_call("create_order", {"cart": cart}, call_id=cart) for cart in turn]
                for turn in TURNS
            ),
            [assistant_message("Ordered.")],
        ]
    )

    async def scenario() -> Any:
        async with AsyncLedgerClient(live_server.url, ledger_token, transport=noting) as ledger:
            wrapped = LedgerFunctionTools(ledger, user_id="u1", run_id="conv-1")
            tools = wrapped.wrap([function_tool(order_tool(sandbox, timeout=5))])
            result = await Runner.run(Agent(name="shop", model=model, tools=tools), "go")
            await wrapped.finish()
            return result

    try:
        result = asyncio.run(scenario())
    finally:
        set_tracing_disabled(False)
    assert result.final_output == "Ordered."
    _one_batch_a_turn(noting, sandbox)


def test_a_langgraph_tool_node_turn_is_one_batch(
    live_server, ledger_token: str, sandbox: SandboxServer
) -> None:
    noting = Noting()
    model = GenericFakeChatModel(
        messages=iter(
            [
                *(
                    AIMessage(
                        content="",
                        tool_calls=[
                            {"name": "create_order", "args": {"cart": cart}, "id": cart}
                            for cart in turn
                        ],
                    )
                    for turn in TURNS
                ),
                AIMessage("Ordered."),
            ]
        )
    )
    config = {"configurable": {"thread_id": "thread-1"}}

    async def scenario() -> dict[str, Any]:
        async with AsyncLedgerClient(live_server.url, ledger_token, transport=noting) as ledger:
            calls = LedgerToolCalls(ledger, user_id="u1")
            graph = _graph(model, [tool(order_tool(sandbox, timeout=5))], calls)
            state = await graph.ainvoke({"messages": [HumanMessage("order")]}, config)
            await calls.finish(config)
            return state

    state = asyncio.run(scenario())
    assert state["messages"][-1].content == "Ordered."
    _one_batch_a_turn(noting, sandbox)


def test_a_pydantic_ai_turn_is_one_batch(
    live_server, ledger_token: str, sandbox: SandboxServer
) -> None:
    noting = Noting()
    turns = iter(
        [
            *(
                ModelResponse(
                    parts=[
                        ToolCallPart("create_order", {"cart": cart}, tool_call_id=cart)
                        for cart in turn
                    ]
                )
                for turn in TURNS
            ),
            ModelResponse(parts=[TextPart("Ordered.")]),
        ]
    )

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        return next(turns)

    async def scenario() -> Any:
        async with AsyncLedgerClient(live_server.url, ledger_token, transport=noting) as ledger:
            toolset = LedgerToolset(
                FunctionToolset([order_tool(sandbox, timeout=5)]),
                ledger=ledger,
                user_id="u1",
                run_id="conv-1",
            )
            result = await PydanticAgent(FunctionModel(respond), toolsets=[toolset]).run("go")
            await toolset.finish()
            return result

    result = asyncio.run(scenario())
    assert result.output == "Ordered."
    _one_batch_a_turn(noting, sandbox)
