"""The Pydantic AI adapter end to end, offline: an agent whose model is Pydantic AI's own
scripted FunctionModel, its tools in a LedgerToolset, a live ledger and the sandbox."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import pytest
from pydantic_ai import (
    Agent,
    DeferredToolRequests,
    DeferredToolResults,
    ModelRetry,
    Tool,
    ToolApproved,
)
from pydantic_ai.messages import (
    ModelMessage,
    ModelResponse,
    RetryPromptPart,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.toolsets import FunctionToolset

from agent_ledger_client import AsyncLedgerClient, LedgerClient
from agent_ledger_client.integrations.pydantic_ai import LedgerToolset
from ledger.models import ApprovalRequest, IdempotencyRecord, Run
from sandbox.server import SandboxServer
from tests.client.agent_tools import amount_order_tool, flaky_write_tool, order_tool, status_tool
from tests.client.approving import Approver, approver_token, large_orders_policy, orders
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


def _retried(messages: list[ModelMessage]) -> bool:
    """Whether Pydantic AI sent the model a retry prompt (its error handling for a tool)."""
    return any(
        isinstance(part, RetryPromptPart)
        for message in messages
        for part in getattr(message, "parts", [])
    )


@pytest.mark.parametrize("retry", [True, False], ids=["ModelRetry", "raised"])
def test_a_lost_order_re_planned_by_the_model_runs_once_and_is_uncertain(
    retry: bool, live_server, ledger_token: str, sandbox: SandboxServer
) -> None:
    """A tool that turns its lost answer into ``ModelRetry`` (Pydantic AI's way of telling the
    model to try again) is still uncertain, and the model never gets the retry prompt. No key
    fields: the re-planned call is the same action by the ledger's own keying."""
    order_at_sandbox = order_tool(sandbox)

    async def create_order(cart: str) -> str:
        """Create an order for a cart."""
        try:
            return await order_at_sandbox(cart)
        except httpx.TimeoutException as lost:
            if retry:
                raise ModelRetry("the shop timed out: please fix your input and retry") from lost
            raise

    order = {"cart": "cart-9"}
    model = _scripted(
        ("create_order", order, "tc-1"), ("create_order", order, "tc-2"), "I will ask the user."
    )
    arm(sandbox, service="orders", mode="timeout_after_commit", hang_seconds=2)

    async def scenario() -> Any:
        async with AsyncLedgerClient(live_server.url, ledger_token) as ledger:
            toolset = LedgerToolset(
                FunctionToolset([create_order]), ledger=ledger, user_id="u1", run_id="conv-1"
            )
            result = await Agent(model, toolsets=[toolset]).run("order cart-9")
            await toolset.finish()
            return result

    result = asyncio.run(scenario())
    first, again = _returns(result.all_messages())
    assert first["code"] == again["code"] == "SIDE_EFFECT_UNCERTAIN"
    assert not _retried(result.all_messages()) and "fix" not in json.dumps([first, again])
    assert result.output == "I will ask the user."
    assert httpx.get(f"{sandbox.url}/orders/stats").json()["objects"] == 1
    assert Run.objects.get(run_id="conv-1").status == "finished"
    record = IdempotencyRecord.objects.get()
    assert (record.state, record.executions, record.duplicate_hits) == ("unknown", 1, 1)


@pytest.mark.parametrize("retry", [True, False], ids=["ModelRetry", "raised"])
def test_a_lost_order_re_sent_under_its_own_tool_call_id_runs_once_and_is_uncertain(
    retry: bool, live_server, ledger_token: str, sandbox: SandboxServer
) -> None:
    """Retry shape (a): the response lost after the order was made, the same tool call (its id
    too) is sent again. One order at the sandbox, and the model is told
    ``SIDE_EFFECT_UNCERTAIN`` both times, never a retry prompt."""
    order_at_sandbox = order_tool(sandbox)

    async def create_order(cart: str) -> str:
        """Create an order for a cart."""
        try:
            return await order_at_sandbox(cart)
        except httpx.TimeoutException as lost:
            if retry:
                raise ModelRetry("the shop timed out: please fix your input and retry") from lost
            raise

    order = ("create_order", {"cart": "cart-9"}, "tc-1")
    model = _scripted(order, order, "I will ask the user.")
    arm(sandbox, service="orders", mode="timeout_after_commit", hang_seconds=2)

    async def scenario() -> Any:
        async with AsyncLedgerClient(live_server.url, ledger_token) as ledger:
            toolset = LedgerToolset(
                FunctionToolset([create_order]), ledger=ledger, user_id="u1", run_id="conv-1"
            )
            result = await Agent(model, toolsets=[toolset]).run("order cart-9")
            await toolset.finish()
            return result

    result = asyncio.run(scenario())
    first, again = _returns(result.all_messages())
    assert first["code"] == again["code"] == "SIDE_EFFECT_UNCERTAIN"
    assert not _retried(result.all_messages()) and "fix" not in json.dumps([first, again])
    assert result.output == "I will ask the user."
    assert httpx.get(f"{sandbox.url}/orders/stats").json()["objects"] == 1


def test_a_re_planned_order_gets_the_recorded_result(
    live_server, ledger_token: str, sandbox: SandboxServer
) -> None:
    order = {"cart": "cart-9"}
    model = _scripted(("create_order", order, "tc-1"), ("create_order", order, "tc-2"), "Done.")

    async def scenario() -> Any:
        async with AsyncLedgerClient(live_server.url, ledger_token) as ledger:
            toolset = LedgerToolset(
                FunctionToolset([order_tool(sandbox)]), ledger=ledger, user_id="u1", run_id="c-1"
            )
            return await Agent(model, toolsets=[toolset]).run("order cart-9")

    first, again = _returns(asyncio.run(scenario()).all_messages())
    assert first == again and json.loads(first)["reference"] == "cart-9"
    assert httpx.get(f"{sandbox.url}/orders/stats").json()["objects"] == 1


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


def _orders_agent(
    live_server: Any,
    token: str,
    sandbox: SandboxServer,
    *,
    approver: str | None = None,
    requires_approval: bool = False,
) -> tuple[Agent[None, Any], LedgerToolset, AsyncLedgerClient, LedgerClient | None]:
    """An agent whose model orders 50, then 500, then says "Done.", under the policy "approve
    create_order when amount > 100"; ``approver``: a person's token for the toolset;
    ``requires_approval``: the tool's own approval gate."""
    large_orders_policy(live_server.url, token)
    ledger = AsyncLedgerClient(live_server.url, token)
    person = LedgerClient(live_server.url, approver) if approver else None
    tool = Tool(amount_order_tool(sandbox), requires_approval=requires_approval)
    toolset = LedgerToolset(
        FunctionToolset([tool]),
        ledger=ledger,
        user_id="u1",
        run_id="conv-9",
        approver=person,
        approval_wait=15,
    )
    model = _scripted(
        ("create_order", {"amount": 50}, "tc-1"), ("create_order", {"amount": 500}, "tc-2"), "Done."
    )
    agent = Agent(model, toolsets=[toolset], output_type=[str, DeferredToolRequests])
    return agent, toolset, ledger, person


@pytest.mark.parametrize("approve", [True, False], ids=["approved", "rejected"])
def test_a_policy_pauses_a_large_order_as_a_deferred_call(
    approve: bool, live_server, ledger_token: str, sandbox: SandboxServer
) -> None:
    """A small order runs at once; a large one ends the run with a deferred call carrying the
    ledger's approval id; the decision given in Pydantic AI reaches the ledger through the
    approver's client: approved, the order runs once; rejected, never, and the model is told
    the reason."""
    agent, toolset, ledger, person = _orders_agent(
        live_server, ledger_token, sandbox, approver=approver_token()
    )

    async def scenario() -> tuple[Any, dict[str, int], Any]:
        paused = await agent.run("order")
        before = orders(sandbox)
        (call,) = paused.output.approvals
        decided = True if approve else await toolset.reject(call, "customer asked to wait")
        results = DeferredToolResults(approvals={call.tool_call_id: decided})
        resumed = await agent.run(
            message_history=paused.all_messages(), deferred_tool_results=results
        )
        await toolset.finish()
        await ledger.aclose()
        return paused, before, resumed

    paused, before, resumed = asyncio.run(scenario())
    assert person is not None
    person.close()
    held = paused.output.metadata["tc-2"]["ledger"]
    request = ApprovalRequest.objects.get()
    assert held["metadata"]["approval_id"] == request.pk and "second look" in held["content"]
    assert before == {"amount-50": 1}
    _small, large = _returns(resumed.all_messages())
    assert resumed.output == "Done."
    if approve:
        assert json.loads(large)["reference"] == "amount-500" and request.state == "consumed"
        assert orders(sandbox) == {"amount-50": 1, "amount-500": 1}
    else:
        assert json.loads(large)["code"] == "APPROVAL_REJECTED"
        assert "customer asked to wait" in large and request.state == "rejected"
        assert orders(sandbox) == {"amount-50": 1}


def test_a_deferred_order_runs_once_a_person_approved_it_in_the_ledger(
    live_server, ledger_token: str, sandbox: SandboxServer
) -> None:
    agent, toolset, ledger, _ = _orders_agent(live_server, ledger_token, sandbox)
    person = approver_token()  # out of the event loop: its context would open a connection

    async def scenario() -> Any:
        paused = await agent.run("order")
        approver = Approver(live_server.url, person, approve=True)
        approver.start()
        await asyncio.to_thread(approver.join, 20)
        results = DeferredToolResults(approvals={"tc-2": True})
        resumed = await agent.run(
            message_history=paused.all_messages(), deferred_tool_results=results
        )
        await toolset.finish()
        await ledger.aclose()
        return resumed

    _small, large = _returns(asyncio.run(scenario()).all_messages())
    assert json.loads(large)["reference"] == "amount-500"
    assert orders(sandbox) == {"amount-50": 1, "amount-500": 1}


def test_an_order_approved_with_other_arguments_runs_nothing(
    live_server, ledger_token: str, sandbox: SandboxServer
) -> None:
    """The ledger's approval is for the action it was asked for: approved in Pydantic AI with
    the amount overridden, the held call is refused by the ledger (422), and the model is
    told; neither amount is ordered."""
    agent, toolset, ledger, person = _orders_agent(
        live_server, ledger_token, sandbox, approver=approver_token()
    )

    async def scenario() -> Any:
        paused = await agent.run("order")
        edited = ToolApproved(override_args={"amount": 5000})
        results = DeferredToolResults(approvals={"tc-2": edited})
        resumed = await agent.run(
            message_history=paused.all_messages(), deferred_tool_results=results
        )
        await toolset.finish()
        await ledger.aclose()
        return resumed

    _small, refused = _returns(asyncio.run(scenario()).all_messages())
    assert person is not None
    person.close()
    assert refused["code"] == "IDEMPOTENCY_KEY_CONFLICT" and "NOT executed" in refused["content"]
    assert orders(sandbox) == {"amount-50": 1}


def test_a_tool_that_requires_approval_pauses_first_and_both_approvals_pass(
    live_server, ledger_token: str, sandbox: SandboxServer
) -> None:
    """The tool's own gate (``requires_approval``) is kept: the small order pauses too, before
    the ledger is asked. Approved in Pydantic AI, the large order is then held by the policy,
    and the approval is forwarded to the ledger: each order runs once."""
    agent, toolset, ledger, person = _orders_agent(
        live_server, ledger_token, sandbox, approver=approver_token(), requires_approval=True
    )

    async def scenario() -> list[Any]:
        paused = await agent.run("order")
        runs = [paused]
        while isinstance(runs[-1].output, DeferredToolRequests):
            approvals = {call.tool_call_id: True for call in runs[-1].output.approvals}
            runs.append(
                await agent.run(
                    message_history=runs[-1].all_messages(),
                    deferred_tool_results=DeferredToolResults(approvals=approvals),
                )
            )
        await toolset.finish()
        await ledger.aclose()
        return runs

    runs = asyncio.run(scenario())
    assert person is not None
    person.close()
    assert len(runs) == 3 and runs[-1].output == "Done."  # one pause per order
    assert orders(sandbox) == {"amount-50": 1, "amount-500": 1}
    request = ApprovalRequest.objects.get()
    assert request.state == "consumed" and request.decided_by is not None
