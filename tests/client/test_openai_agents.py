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
    ToolGuardrailFunctionOutput,
    function_tool,
    set_tracing_disabled,
    tool_input_guardrail,
)
from agents.testing import ScriptedModel, assistant_message, function_call

from agent_ledger_client import AsyncLedgerClient
from agent_ledger_client.integrations.openai_agents import LedgerFunctionTools
from ledger.models import IdempotencyRecord, Run
from sandbox.server import SandboxServer
from tests.client.agent_tools import flaky_write_tool, order_tool, status_tool
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
    result = _agent_run(
        live_server,
        ledger_token,
        model,
        [create_order],
        run_id="conv-1",
        key_fields={"create_order": ["cart"]},
    )
    first, retry = (json.loads(output) for output in _tool_outputs(result))
    assert first["code"] == retry["code"] == "SIDE_EFFECT_UNCERTAIN"
    assert result.final_output == "I will ask the user."
    assert httpx.get(f"{sandbox.url}/orders/stats").json()["objects"] == 1
    assert Run.objects.get(run_id="conv-1").status == "finished"
    record = IdempotencyRecord.objects.get()
    assert (record.executions, record.duplicate_hits) == (1, 1)
    assert record.key.endswith(":create_order:cart=cart-9")


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
