"""The OpenAI Agents SDK adapter end to end, offline: an agent whose model is the SDK's own
ScriptedModel, its function tools wrapped by the ledger, a live ledger and the sandbox."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from agents import (
    Agent,
    Runner,
    RunState,
    ToolGuardrailFunctionOutput,
    function_tool,
    set_tracing_disabled,
    tool_input_guardrail,
)
from agents.testing import ScriptedModel, assistant_message, function_call

from agent_ledger_client import AsyncLedgerClient, LedgerClient
from agent_ledger_client.integrations.openai_agents import LedgerFunctionTools
from ledger.models import ApprovalRequest, IdempotencyRecord, Run
from sandbox.server import SandboxServer
from tests.client.agent_tools import amount_order_tool, flaky_write_tool, order_tool, status_tool
from tests.client.approving import Approver, approver_token, large_orders_policy, orders
from tests.client.shadowing import candidate_in_shadow
from tests.client.test_seed_eval_cases import _approve_when_asked
from tests.sandbox_fixtures import arm

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def offline() -> Iterator[None]:
    """No trace export: the runs stay on this machine whatever the environment holds."""
    set_tracing_disabled(True)
    yield
    set_tracing_disabled(False)


def _tool_outputs(result: Any) -> list[str]:
    return [item.output for item in result.new_items if item.type == "tool_call_output_item"]


def _agent_run(
    live_server: Any,
    token: str,
    model: ScriptedModel,
    tools: list[Any],
    *,
    run_id: str,
    key_fields: dict[str, list[str]] | None = None,
    approve_interruptions: bool = False,
) -> Any:
    """One agent run with its tools wrapped (after registering ``key_fields``), resumed with
    its interruptions approved if asked, and its ledger run finished."""

    async def scenario() -> Any:
        async with AsyncLedgerClient(live_server.url, token) as ledger:
            for name, fields in (key_fields or {}).items():
                await ledger.register_tool(name, key_fields=fields)
            wrapped = LedgerFunctionTools(ledger, user_id="u1", run_id=run_id)
            agent = Agent(name="shop", model=model, tools=wrapped.wrap(tools))
            result = await Runner.run(agent, "go")
            if approve_interruptions:
                result = await _resume_approving(agent, result)
            await wrapped.finish()
            return result

    return asyncio.run(scenario())


def _fix_your_input(ctx: Any, error: Exception) -> str:
    return f"Please fix your input and try again ({error})."


@pytest.mark.parametrize(
    "handling",
    ["default", "failure_error_function", "timeout_seconds"],
)
def test_a_lost_order_re_planned_by_the_model_runs_once_and_is_uncertain(
    handling: str, live_server, ledger_token: str, sandbox: SandboxServer
) -> None:
    """The SDK's error handling (a ``failure_error_function`` that tells the model to fix its
    input, a tool's ``timeout_seconds``) does not make a lost response anything but uncertain.
    No key fields: the re-planned call is the same action by the ledger's own keying."""
    if handling == "timeout_seconds":  # the SDK's timeout strikes before the tool's own
        create_order = function_tool(order_tool(sandbox, timeout=10), timeout=1)
    elif handling == "failure_error_function":
        create_order = function_tool(order_tool(sandbox), failure_error_function=_fix_your_input)
    else:
        create_order = function_tool(order_tool(sandbox))
    order = {"cart": "cart-9"}
    model = ScriptedModel(
        [
            [function_call("create_order", order, call_id="call-1")],
            [function_call("create_order", order, call_id="call-2")],
            [assistant_message("I will ask the user.")],
        ]
    )
    arm(sandbox, service="orders", mode="timeout_after_commit", hang_seconds=3)
    result = _agent_run(live_server, ledger_token, model, [create_order], run_id="conv-1")
    outputs = _tool_outputs(result)
    first, retry = (json.loads(output) for output in outputs)
    assert first["code"] == retry["code"] == "SIDE_EFFECT_UNCERTAIN"
    assert not any("fix" in output.lower() for output in outputs)
    assert result.final_output == "I will ask the user."
    assert httpx.get(f"{sandbox.url}/orders/stats").json()["objects"] == 1
    assert Run.objects.get(run_id="conv-1").status == "finished"
    record = IdempotencyRecord.objects.get()
    assert (record.state, record.executions, record.duplicate_hits) == ("unknown", 1, 1)


@pytest.mark.parametrize(
    "handling",
    ["default", "failure_error_function", "timeout_seconds"],
)
def test_a_lost_order_re_sent_under_its_own_call_id_runs_once_and_is_uncertain(
    handling: str, live_server, ledger_token: str, sandbox: SandboxServer
) -> None:
    """Retry shape (a): the response lost after the order was made, the same function call
    (its call id too) is sent again. The SDK never runs a call id twice in one run, so the
    call comes again from a runtime that runs the turn again (its answer never reached the
    app): a new ``Runner.run`` in the same ledger run. One order at the sandbox, and the model
    is told ``SIDE_EFFECT_UNCERTAIN`` both times, whatever the SDK's error handling."""
    if handling == "timeout_seconds":
        create_order = function_tool(order_tool(sandbox, timeout=10), timeout=1)
    elif handling == "failure_error_function":
        create_order = function_tool(order_tool(sandbox), failure_error_function=_fix_your_input)
    else:
        create_order = function_tool(order_tool(sandbox))
    order = [function_call("create_order", {"cart": "cart-9"}, call_id="call-1")]
    arm(sandbox, service="orders", mode="timeout_after_commit", hang_seconds=3)

    async def scenario() -> list[str]:
        outputs: list[str] = []
        async with AsyncLedgerClient(live_server.url, ledger_token) as ledger:
            for _turn in range(2):
                tools = LedgerFunctionTools(ledger, user_id="u1", run_id="conv-1")
                model = ScriptedModel([order, [assistant_message("I will ask the user.")]])
                agent = Agent(name="shop", model=model, tools=tools.wrap([create_order]))
                result = await Runner.run(agent, "go")
                assert result.final_output == "I will ask the user."
                outputs += _tool_outputs(result)
            await tools.finish()
        return outputs

    outputs = asyncio.run(scenario())
    first, again = (json.loads(output) for output in outputs)
    assert first["code"] == again["code"] == "SIDE_EFFECT_UNCERTAIN"
    assert first["metadata"]["idempotency_key"] == again["metadata"]["idempotency_key"]
    assert not any("fix" in output.lower() for output in outputs)
    assert httpx.get(f"{sandbox.url}/orders/stats").json()["objects"] == 1


def test_a_re_planned_order_gets_the_recorded_result(
    live_server, ledger_token: str, sandbox: SandboxServer
) -> None:
    order = {"cart": "cart-9"}
    model = ScriptedModel(
        [
            [function_call("create_order", order, call_id="call-1")],
            [function_call("create_order", order, call_id="call-2")],
            [assistant_message("Ordered.")],
        ]
    )
    tools = [function_tool(order_tool(sandbox))]
    result = _agent_run(live_server, ledger_token, model, tools, run_id="conv-1")
    first, again = _tool_outputs(result)
    assert first == again and json.loads(first)["reference"] == "cart-9"
    assert httpx.get(f"{sandbox.url}/orders/stats").json()["objects"] == 1


async def _resume_approving(agent: Agent[Any], paused: Any) -> Any:
    """The interrupted run, resumed with every interruption approved in the SDK."""
    state = paused.to_state()
    for item in paused.interruptions:
        state.approve(item)
    return await Runner.run(agent, state)


def _paused_write(
    live_server: Any,
    token: str,
    sandbox: SandboxServer,
    *,
    approve: bool,
    run_id: str,
    order_beside: bool = False,
) -> tuple[Any, Any, list[str]]:
    """A write_file whose first attempt is lost and which the model re-issues under a new call
    id (with ``order_beside``, together with a create_order): the ledger holds the retry for a
    human, the run is interrupted, the approver decides in the ledger, and the run resumes
    with the interruption approved in the SDK."""
    attempts: list[str] = []
    tools = [function_tool(flaky_write_tool(sandbox, attempts)), function_tool(order_tool(sandbox))]
    write = {"path": "app.py", "content": "new"}
    retry = [function_call("write_file", write, call_id="call-2")]
    if order_beside:
        retry.append(function_call("create_order", {"cart": "cart-9"}, call_id="call-3"))
    model = ScriptedModel(
        [
            [function_call("write_file", write, call_id="call-1")],
            retry,
            [assistant_message("Done.")],
        ]
    )

    async def scenario() -> tuple[Any, Any]:
        async with AsyncLedgerClient(live_server.url, token) as ledger:
            await ledger.register_tool("write_file", key_fields=["path"])
            wrapped = LedgerFunctionTools(ledger, user_id="u1", run_id=run_id, approval_wait=15)
            agent = Agent(name="coder", model=model, tools=wrapped.wrap(tools))
            paused = await Runner.run(agent, "write app.py")
            approver = _approve_when_asked(approve=approve)
            await asyncio.to_thread(approver.join, 15)
            resumed = await _resume_approving(agent, paused)
            await wrapped.finish()
            return paused, resumed

    paused, resumed = asyncio.run(scenario())
    return paused, resumed, attempts


def test_an_approval_interrupts_the_run_and_resumes_with_the_approval(
    live_server, ledger_token: str, sandbox: SandboxServer
) -> None:
    paused, resumed, attempts = _paused_write(
        live_server, ledger_token, sandbox, approve=True, run_id="conv-3"
    )
    (pending,) = paused.interruptions
    assert (pending.tool_name, pending.call_id) == ("write_file", "call-2")
    lost, written = _tool_outputs(resumed)
    assert json.loads(lost)["code"] == "SIDE_EFFECT_UNCERTAIN"
    assert written == "written" and resumed.final_output == "Done."
    assert httpx.get(f"{sandbox.url}/workspace/files/app.py").json()["content"] == "new"
    assert attempts == ["app.py", "app.py"]
    assert IdempotencyRecord.objects.get().state == "succeeded"


def test_an_approval_rejected_in_the_ledger_reaches_the_model(
    live_server, ledger_token: str, sandbox: SandboxServer
) -> None:
    paused, resumed, attempts = _paused_write(
        live_server, ledger_token, sandbox, approve=False, run_id="conv-4"
    )
    assert [item.call_id for item in paused.interruptions] == ["call-2"]
    _lost, refused = (json.loads(output) for output in _tool_outputs(resumed))
    assert refused["code"] == "APPROVAL_REJECTED" and "not this file" in refused["content"]
    assert attempts == ["app.py"]  # the lost attempt only
    assert httpx.get(f"{sandbox.url}/workspace/files/app.py").status_code == 404


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

    # The SDK itself holds arguments it cannot inspect for approval.
    result = _agent_run(
        live_server,
        ledger_token,
        model,
        [create_order],
        run_id="conv-2",
        approve_interruptions=True,
    )
    (output,) = _tool_outputs(result)
    assert json.loads(output)["code"] == "INVALID_TOOL_INPUT" and ran == []
    record = IdempotencyRecord.objects.get()
    assert (record.state, record.error_retryable) == ("failed_final", True)


def test_a_call_beside_an_interrupted_one_runs_once(
    live_server, ledger_token: str, sandbox: SandboxServer
) -> None:
    paused, resumed, attempts = _paused_write(
        live_server, ledger_token, sandbox, approve=True, run_id="conv-5", order_beside=True
    )
    assert [item.call_id for item in paused.interruptions] == ["call-2"]
    assert resumed.final_output == "Done." and attempts == ["app.py", "app.py"]
    assert httpx.get(f"{sandbox.url}/orders/stats").json()["objects"] == 1
    order = IdempotencyRecord.objects.get(tool__name="create_order")
    assert (order.state, order.executions) == ("succeeded", 1)


def test_a_call_a_tool_guardrail_refuses_is_reported_not_started(
    live_server, ledger_token: str
) -> None:
    ran: list[str] = []

    @tool_input_guardrail
    def no_orders(data: Any) -> ToolGuardrailFunctionOutput:
        return ToolGuardrailFunctionOutput.reject_content("orders are closed today")

    @function_tool(tool_input_guardrails=[no_orders])
    def create_order(cart: str) -> str:
        """Create an order for a cart."""
        ran.append(cart)
        return "o-1"

    model = ScriptedModel(
        [
            [function_call("create_order", {"cart": "c-1"}, call_id="call-1")],
            [assistant_message("ok")],
        ]
    )

    result = _agent_run(live_server, ledger_token, model, [create_order], run_id="conv-6")
    assert _tool_outputs(result) == ["orders are closed today"] and ran == []
    record = IdempotencyRecord.objects.get()
    assert (record.state, record.error_retryable) == ("failed_final", True)


def test_a_mirrored_run_reads_and_shows_the_model_the_dry_run(
    live_server, ledger_token: str, sandbox: SandboxServer
) -> None:
    candidate_in_shadow()
    reads: list[str] = []
    tools = [function_tool(order_tool(sandbox)), function_tool(status_tool(reads))]
    model = ScriptedModel(
        [
            [function_call("get_order_status", {"order": "o-1"}, call_id="call-1")],
            [function_call("create_order", {"cart": "cart-5"}, call_id="call-2")],
            [assistant_message("Ordered.")],
        ]
    )

    async def scenario() -> Any:
        async with AsyncLedgerClient(live_server.url, ledger_token) as ledger:
            await ledger.register_tool("create_order", key_fields=["cart"])
            live = await ledger.start_run(user_id="u1", run_id="conv-live")
            mirror = live.mirror
            assert mirror is not None
            wrapped = LedgerFunctionTools(ledger, user_id="u1", run_id=mirror.run_id, mirror=mirror)
            agent = Agent(name="shop", model=model, tools=wrapped.wrap(tools))
            result = await Runner.run(agent, "order cart-5")
            await wrapped.finish()
            return result

    result = asyncio.run(scenario())
    read, dry = _tool_outputs(result)
    assert read == "o-1 is pending" and reads == ["o-1"]
    assert json.loads(dry)["code"] == "SHADOW_DRY_RUN"
    assert result.final_output == "Ordered."  # the model went on after seeing it
    assert httpx.get(f"{sandbox.url}/orders/stats").json()["objects"] == 0
    shadow = Run.objects.get(run_id="conv-live.shadow")
    assert shadow.shadow_of is not None and shadow.shadow_of.run_id == "conv-live"
    assert shadow.status == "finished"


def _orders_agent(
    live_server: Any,
    token: str,
    sandbox: SandboxServer,
    amount: int,
    *,
    approver: str | None = None,
    needs_approval: bool = False,
    key_fields: list[str] | None = None,
) -> tuple[Agent[Any], LedgerFunctionTools, AsyncLedgerClient, LedgerClient | None]:
    """An agent whose model orders ``amount``, then says "Done.", under the policy "approve
    create_order when amount > 100"; ``approver``: a person's token for the adapter;
    ``needs_approval``: the tool's own approval gate."""
    large_orders_policy(live_server.url, token)
    ledger = AsyncLedgerClient(live_server.url, token)
    if key_fields:
        with LedgerClient(live_server.url, token) as registry:
            registry.register_tool("create_order", key_fields=key_fields)
    person = LedgerClient(live_server.url, approver) if approver else None
    tools = LedgerFunctionTools(
        ledger, user_id="u1", run_id="conv-9", approver=person, approval_wait=15
    )
    order = function_tool(amount_order_tool(sandbox), needs_approval=needs_approval)
    model = ScriptedModel(
        [
            [function_call("create_order", {"amount": amount}, call_id="call-1")],
            [assistant_message("Done.")],
        ]
    )
    agent = Agent(name="shop", model=model, tools=tools.wrap([order]))
    return agent, tools, ledger, person


def test_a_small_order_runs_at_once(live_server, ledger_token: str, sandbox: SandboxServer) -> None:
    agent, tools, ledger, _ = _orders_agent(live_server, ledger_token, sandbox, 50)

    async def scenario() -> Any:
        result = await Runner.run(agent, "order")
        await tools.finish()
        await ledger.aclose()
        return result

    result = asyncio.run(scenario())
    assert result.interruptions == [] and result.final_output == "Done."
    assert orders(sandbox) == {"amount-50": 1}


@pytest.mark.parametrize("approve", [True, False], ids=["approved", "rejected"])
def test_a_policy_pauses_a_large_order_as_the_sdks_interruption(
    approve: bool, live_server, ledger_token: str, sandbox: SandboxServer
) -> None:
    """A large order interrupts the run; the interruption carries the ledger's approval id
    (``approval_of``); the decision made in the SDK reaches the ledger through the approver's
    client: approved (``state.approve``), the order runs once; rejected (``reject``), never,
    and the model is told the reason."""
    agent, tools, ledger, person = _orders_agent(
        live_server, ledger_token, sandbox, 500, approver=approver_token()
    )

    async def scenario() -> tuple[Any, dict[str, Any] | None, Any]:
        paused = await Runner.run(agent, "order")
        (item,) = paused.interruptions
        held = tools.approval_of(item)
        state = paused.to_state()
        if approve:
            state.approve(item)
        else:
            await tools.reject(state, item, "customer asked to wait")
        resumed = await Runner.run(agent, state)
        await tools.finish()
        await ledger.aclose()
        return paused, held, resumed

    paused, held, resumed = asyncio.run(scenario())
    assert person is not None
    person.close()
    request = ApprovalRequest.objects.get()
    assert [item.call_id for item in paused.interruptions] == ["call-1"]
    assert held is not None and held["metadata"]["approval_id"] == request.pk
    assert "second look" in held["content"]
    (output,) = _tool_outputs(resumed)
    assert resumed.final_output == "Done."
    if approve:
        assert json.loads(output)["reference"] == "amount-500" and request.state == "consumed"
        assert orders(sandbox) == {"amount-500": 1}
    else:
        assert json.loads(output)["code"] == "APPROVAL_REJECTED"
        assert "customer asked to wait" in output
        assert request.state == "rejected" and request.decision_reason == "customer asked to wait"
        assert orders(sandbox) == {}


def test_a_paused_order_runs_once_a_person_approved_it_in_the_ledger(
    live_server, ledger_token: str, sandbox: SandboxServer
) -> None:
    agent, tools, ledger, _ = _orders_agent(live_server, ledger_token, sandbox, 500)
    person = approver_token()

    async def scenario() -> Any:
        paused = await Runner.run(agent, "order")
        approver = Approver(live_server.url, person, approve=True)
        approver.start()
        resumed = await _resume_approving(agent, paused)
        await asyncio.to_thread(approver.join, 20)
        await tools.finish()
        await ledger.aclose()
        return resumed

    (output,) = _tool_outputs(asyncio.run(scenario()))
    assert json.loads(output)["reference"] == "amount-500"
    assert orders(sandbox) == {"amount-500": 1}


@pytest.mark.parametrize("amount", [50, 500])
def test_a_tool_that_needs_approval_pauses_and_both_approvals_pass(
    amount: int, live_server, ledger_token: str, sandbox: SandboxServer
) -> None:
    """The tool's own ``needs_approval=True`` is kept: the run pauses once, before the ledger
    is asked. Approved in the SDK, a small order runs; a large one is held by the policy too,
    and the SDK's approval is forwarded to the ledger: it runs once."""
    agent, tools, ledger, person = _orders_agent(
        live_server, ledger_token, sandbox, amount, approver=approver_token(), needs_approval=True
    )

    async def scenario() -> tuple[Any, Any]:
        paused = await Runner.run(agent, "order")
        resumed = await _resume_approving(agent, paused)
        await tools.finish()
        await ledger.aclose()
        return paused, resumed

    paused, resumed = asyncio.run(scenario())
    assert person is not None
    person.close()
    (item,) = paused.interruptions
    assert tools.approval_of(item) is None  # the SDK's own pause: the ledger was not asked
    assert resumed.interruptions == [] and resumed.final_output == "Done."
    assert orders(sandbox) == {f"amount-{amount}": 1}
    if amount > 100:
        request = ApprovalRequest.objects.get()
        assert request.state == "consumed" and request.decided_by is not None
    else:
        assert not ApprovalRequest.objects.exists()


def test_a_rejection_in_the_sdk_of_its_own_pause_runs_nothing(
    live_server, ledger_token: str, sandbox: SandboxServer
) -> None:
    agent, tools, ledger, _ = _orders_agent(
        live_server, ledger_token, sandbox, 50, needs_approval=True
    )

    async def scenario() -> Any:
        paused = await Runner.run(agent, "order")
        state = paused.to_state()
        (item,) = paused.interruptions
        await tools.reject(state, item, "not today")
        resumed = await Runner.run(agent, state)
        await tools.finish()
        await ledger.aclose()
        return resumed

    (output,) = _tool_outputs(asyncio.run(scenario()))
    assert json.loads(output)["code"] == "APPROVAL_REJECTED" and "not today" in output
    assert orders(sandbox) == {}


def test_an_order_of_the_same_cart_with_another_amount_runs_nothing(
    live_server, ledger_token: str, sandbox: SandboxServer
) -> None:
    """With key fields, the same cart is the same business action: a call of it with another
    amount than the one held for approval is refused by the ledger (422) as the model's
    observation, not an exception, and nothing of that amount is ordered."""
    large_orders_policy(live_server.url, ledger_token)
    sent: list[dict[str, Any]] = []

    @function_tool
    async def create_order(cart: str, amount: int) -> str:
        """Create an order of an amount for a cart."""
        sent.append({"cart": cart, "amount": amount})
        return await amount_order_tool(sandbox)(amount)

    model = ScriptedModel(
        [
            [function_call("create_order", {"cart": "c-1", "amount": 500}, call_id="call-1")],
            [function_call("create_order", {"cart": "c-1", "amount": 5000}, call_id="call-2")],
            [assistant_message("Done.")],
        ]
    )

    async def scenario() -> tuple[Any, Any]:
        async with AsyncLedgerClient(live_server.url, ledger_token) as ledger:
            await ledger.register_tool("create_order", key_fields=["cart"])
            tools = LedgerFunctionTools(ledger, user_id="u1", run_id="conv-8", approval_wait=1)
            agent = Agent(name="shop", model=model, tools=tools.wrap([create_order]))
            paused = await Runner.run(agent, "order")
            state = paused.to_state()
            await tools.reject(state, paused.interruptions[0], "too large")
            resumed = await Runner.run(agent, state)
            await tools.finish()
            return paused, resumed

    paused, resumed = asyncio.run(scenario())
    assert [item.call_id for item in paused.interruptions] == ["call-1"]
    _rejected, refused = (json.loads(output) for output in _tool_outputs(resumed))
    assert refused["code"] == "IDEMPOTENCY_KEY_CONFLICT" and sent == []
    assert orders(sandbox) == {}


def test_an_order_approved_in_the_sdk_then_edited_in_the_saved_state_runs_nothing(
    live_server, ledger_token: str, sandbox: SandboxServer
) -> None:
    """Approved in the SDK, the run's saved state edited to order 5000 before it resumes (its
    fingerprints dropped, as a state forged outside the SDK would be) is not the approved
    action: the run pauses again on it, the ledger's approval of 500 is never spent, and
    neither amount is ordered."""
    agent, tools, ledger, person = _orders_agent(
        live_server, ledger_token, sandbox, 500, approver=approver_token()
    )

    async def scenario() -> Any:
        paused = await Runner.run(agent, "order")
        (item,) = paused.interruptions
        state = paused.to_state()
        state.approve(item)
        saved = state.to_json()
        # The SDK fingerprints each invocation and refuses one edited in place.
        saved["context"]["tool_invocations"] = {}
        forged = json.dumps(saved).replace(r"{\"amount\":500}", r"{\"amount\":5000}")
        edited = json.loads(forged)
        assert edited != saved
        resumed = await Runner.run(agent, await RunState.from_json(agent, edited))
        await tools.finish()
        await ledger.aclose()
        return resumed

    resumed = asyncio.run(scenario())
    assert person is not None
    person.close()
    assert _tool_outputs(resumed) == []
    (pause,) = resumed.interruptions
    assert json.loads(pause.raw_item.arguments) == {"amount": 5000}
    (approval,) = ApprovalRequest.objects.all()
    assert approval.entry.input == {"amount": 500} and approval.state == "pending"
    assert orders(sandbox) == {}
