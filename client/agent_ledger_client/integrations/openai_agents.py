"""OpenAI Agents SDK: function tools whose every call goes through the ledger.

    ledger_tools = LedgerFunctionTools(ledger, user_id="user-7", run_id="conversation-1")
    agent = Agent(name="shop", tools=ledger_tools.wrap([create_order]))
    result = await Runner.run(agent, "order cart-42")
    await ledger_tools.finish()

``ToolContext.tool_call_id`` is the step id; one ``LedgerFunctionTools`` is one ledger run. A
call the model re-plans (a new call id, the same arguments) is the same action: it gets the
recorded result, or ``SIDE_EFFECT_UNCERTAIN``. A tool's exception reaches the ledger (uncertain,
or failed for a ``ToolError``) rather than the tool's ``failure_error_function``, whose message
would read like success or ask the model to fix its input; a tool's ``timeout_seconds`` is the
ledger's tool timeout, so a timeout is uncertain. Arguments that are not a JSON object are a
failed call with no side effect.

**Approvals.** Both gates must pass. A tool's own ``needs_approval`` is kept and comes first:
when it asks, the run is interrupted before the ledger is asked. Otherwise the ledger is asked
(the answer is kept for the call, so it is asked once), and a call it holds for a human
(``APPROVAL_REQUIRED``) becomes one of the SDK's approval interruptions
(``result.interruptions``); ``approval_of(item)`` is the ledger's observation, with its
``approval_id`` and the policy's reason. Then, on the run state:

- ``state.approve(item)`` and run the state again: the call runs once the ledger's approval is
  given too, forwarded through the ``approver`` client (a person with the approver role, none
  of the action's principals) or decided in the console, waited for up to ``approval_wait``
  seconds. A call the tool's own gate paused that the ledger then holds (a policy) is decided
  by the same approval, forwarded alike;
- ``await ledger_tools.reject(state, item, reason)``: the SDK's rejection, whose message is the
  ledger's ``APPROVAL_REJECTED`` with the reason once the approver client rejected the ledger's
  approval too. The call never runs. The SDK has no hook on a rejection, so a plain
  ``state.reject(item)`` leaves the ledger's request open for its approvers.

With ``mirror`` (a live run's ``run.mirror``) the ledger run is the shadow run mirroring that
live run (``run_id=mirror.run_id``): run the candidate agent on the live run's input; its reads
run, and each side-effecting tool call comes back to the model as the ledger's
``SHADOW_DRY_RUN`` observation without the tool running.
"""

from __future__ import annotations

import dataclasses
import inspect
import json
from collections.abc import Sequence
from typing import Any

from agents import FunctionTool, RunContextWrapper, RunState, ToolApprovalItem
from agents.tool_context import ToolContext

from agent_ledger_client.aio import AsyncLedgerClient, AsyncRun
from agent_ledger_client.errors import InvalidToolInput
from agent_ledger_client.integrations.approvals import Approver, approved, is_held, rejected
from agent_ledger_client.mirroring import Mirror, pinning
from agent_ledger_client.observations import model_text, normalised
from agent_ledger_client.protocol import CallContext, Response, TransportFailure


@dataclasses.dataclass(frozen=True)
class _Asked:
    """The ledger's first answer to a call, kept until the SDK starts the tool."""

    tool: str
    tool_input: dict[str, Any]
    answer: Response | TransportFailure

    @property
    def holds_the_lease(self) -> bool:
        """An ``execute`` answer: the key is held for this call until it reports."""
        return _decision(self.answer) == "execute"


def _decision(answer: Response | TransportFailure) -> str | None:
    body = answer.body if isinstance(answer, Response) else None
    return body.get("decision") if isinstance(body, dict) else None


def _not_started(call: CallContext) -> Any:
    raise InvalidToolInput("the agent run did not start the tool")


class LedgerFunctionTools:
    """Wraps function tools so each call is recorded, decided and reported by the ledger."""

    def __init__(
        self,
        ledger: AsyncLedgerClient,
        *,
        user_id: str,
        run_id: str,
        approver: Approver | None = None,
        approval_wait: float = 30.0,
        mirror: Mirror | None = None,
    ) -> None:
        self.ledger = ledger
        self.user_id = user_id
        self.run_id = run_id
        #: A person's client (approver role) through which decisions made in the SDK reach
        #: the ledger; None: the ledger's approvers decide in its console.
        self.approver = approver
        #: The live run this ledger run mirrors as a shadow run, if any.
        self.mirror = mirror
        #: How long an approved call waits for the ledger to show the approval.
        self.approval_wait = approval_wait
        self._run: AsyncRun | None = None
        #: The ledger's first answers, by tool-call id, from ``needs_approval`` to the call.
        self._answers: dict[str, _Asked] = {}
        #: The ledger's observations of the calls it holds for a human, by tool-call id.
        self._held: dict[str, dict[str, Any]] = {}

    async def ledger_run(self) -> AsyncRun:
        """The ledger run, started once (starting is idempotent by run id)."""
        if self._run is None:
            self._run = await self.ledger.start_run(
                user_id=self.user_id, run_id=self.run_id, **pinning(self.mirror)
            )
        return self._run

    async def finish(self, termination_reason: str = "completed") -> None:
        """End the ledger run. A call the ledger answered whose tool the SDK then did not
        start (a tool guardrail refused it) is reported failed with no side effect, so its
        key is not left held until the lease lapses."""
        run = await self.ledger_run()
        while self._answers:
            call_id, asked = self._answers.popitem()
            if not asked.holds_the_lease:
                continue
            await run.call(
                asked.tool,
                asked.tool_input,
                execute=_not_started,
                answer=asked.answer,
                step_id=call_id,
            )
        await run.finish(termination_reason)
        self._run = None

    def wrap(self, tools: Sequence[FunctionTool]) -> list[FunctionTool]:
        """The same tools, each call going through the ledger."""
        return [self._wrapped(tool) for tool in tools]

    def approval_of(self, item: ToolApprovalItem) -> dict[str, Any] | None:
        """The ledger's ``APPROVAL_REQUIRED`` observation for an interruption it asked for
        (``metadata.approval_id``, the policy's reason in ``content``); None when only the
        tool's own ``needs_approval`` paused the call."""
        return self._held.get(_call_id(item))

    async def reject(self, state: RunState[Any], item: ToolApprovalItem, reason: str) -> None:
        """Reject an interruption in the SDK's run state and, through the approver client, the
        ledger's approval of the call with ``reason``: the call never runs, and the model reads
        the rejection."""
        held = self._held.pop(_call_id(item), None)
        tool = item.tool_name or "the tool"
        observation = await rejected(
            self.ledger, held, tool=tool, reason=reason, approver=self.approver
        )
        state.reject(item, rejection_message=model_text(observation))

    async def _held_for_a_human(self, name: str, tool_input: dict[str, Any], call_id: str) -> bool:
        """Whether the ledger holds this call for a human; any other answer is kept for the
        call itself, so the ledger is asked once."""
        run = await self.ledger_run()
        answer = await self.ledger.ask(run.run_id, name, tool_input, step_id=call_id)
        if _decision(answer) == "approval_required" and isinstance(answer, Response):
            self._held[call_id] = normalised(answer.body["observation"])
            return True
        self._answers[call_id] = _Asked(name, tool_input, answer)
        return False

    def _wrapped(self, tool: FunctionTool) -> FunctionTool:
        # The SDK turns a tool's exception into a message for the model by default, which
        # would report a timeout as success; this copy raises, so it is reported uncertain.
        raw = dataclasses.replace(
            tool, _failure_error_function=None, _use_default_failure_error_function=False
        )
        # The tool's timeout is the ledger's: a timeout is then uncertain, and the SDK's own
        # would also cut short the ledger's round trips and the wait for an approval.
        timeout = {"timeout": tool.timeout_seconds} if tool.timeout_seconds else {}

        async def needs_approval(
            ctx: RunContextWrapper[Any], tool_input: dict[str, Any], call_id: str
        ) -> bool:
            if await _own_gate(tool, ctx, tool_input, call_id):
                return True  # the SDK's approval first; the ledger is asked when it runs
            return await self._held_for_a_human(tool.name, tool_input, call_id)

        async def invoke(ctx: ToolContext[Any], arguments: str) -> str:
            run = await self.ledger_run()
            parsed = _json_object(arguments)
            tool_input = parsed if parsed is not None else {"arguments": arguments}

            async def execute(call: CallContext) -> Any:
                if parsed is None:
                    raise InvalidToolInput("the arguments are not a JSON object")
                return await raw.on_invoke_tool(ctx, arguments)

            held = self._held.pop(ctx.tool_call_id, None)
            if held is None:
                asked = self._answers.pop(ctx.tool_call_id, None)
                observation = await run.call(
                    tool.name,
                    tool_input,
                    execute=execute,
                    answer=asked.answer if asked is not None else None,
                    step_id=ctx.tool_call_id,
                    wait_for_approval=False,
                    **timeout,
                )
                if not is_held(observation):
                    return model_text(observation)
                # The SDK runs only calls it approved or never asked about, and a call it did
                # not ask about was held before the run paused: the SDK approved this one.
                held = observation
            observation = await approved(
                self.ledger,
                held,
                tool_input=tool_input,
                execute=execute,
                approver=self.approver,
                wait=self.approval_wait,
                **timeout,
            )
            return model_text(observation)

        return dataclasses.replace(
            tool, on_invoke_tool=invoke, needs_approval=needs_approval, timeout_seconds=None
        )


async def _own_gate(
    tool: FunctionTool, ctx: RunContextWrapper[Any], tool_input: dict[str, Any], call_id: str
) -> bool:
    """Whether the tool's own ``needs_approval`` asks for this call."""
    gate = tool.needs_approval
    if not callable(gate):
        return bool(gate)
    asked = gate(ctx, tool_input, call_id)
    return bool(await asked if inspect.isawaitable(asked) else asked)


def _call_id(item: ToolApprovalItem) -> str:
    raw = item.raw_item
    value = raw.get("call_id") if isinstance(raw, dict) else getattr(raw, "call_id", None)
    return str(value or "")


def _json_object(arguments: str) -> dict[str, Any] | None:
    """The model's arguments as an object, or None when they are not one."""
    try:
        parsed = json.loads(arguments or "{}")
    except ValueError:
        return None
    return parsed if isinstance(parsed, dict) else None
