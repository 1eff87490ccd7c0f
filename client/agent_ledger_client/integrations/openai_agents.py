"""OpenAI Agents SDK: function tools whose every call goes through the ledger.

    ledger_tools = LedgerFunctionTools(ledger, user_id="user-7", run_id="conversation-1")
    agent = Agent(name="shop", tools=ledger_tools.wrap([create_order]))
    result = await Runner.run(agent, "order cart-42")
    await ledger_tools.finish()

``ToolContext.tool_call_id`` is the step id; one ``LedgerFunctionTools`` is one ledger run.
Each wrapped tool's ``needs_approval`` asks the ledger first: a call the ledger holds for a
human (``APPROVAL_REQUIRED``) becomes one of the SDK's approval interruptions
(``result.interruptions``). Once the approver has decided in the ledger, approve the item in
the run state (``state.approve(item)``) and run the state again: the call runs if the ledger
shows it approved, or the model gets ``APPROVAL_REJECTED`` with the approver's reason.
Arguments that are not a JSON object are a failed call with no side effect; a tool's exception
is reported to the ledger (uncertain, or failed for a ``ToolError``) rather than turned into a
message that reads like success.

With ``mirror`` (a live run's ``run.mirror``) the ledger run is the shadow run mirroring that
live run (``run_id=mirror.run_id``): run the candidate agent on the live run's input; its reads
run, and each side-effecting tool call comes back to the model as the ledger's
``SHADOW_DRY_RUN`` observation without the tool running.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from typing import Any

from agents import FunctionTool, RunContextWrapper
from agents.tool_context import ToolContext

from agent_ledger_client.aio import AsyncLedgerClient, AsyncRun
from agent_ledger_client.errors import InvalidToolInput
from agent_ledger_client.mirroring import Mirror, pinning
from agent_ledger_client.observations import model_text
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
        approval_wait: float = 30.0,
        mirror: Mirror | None = None,
    ) -> None:
        self.ledger = ledger
        self.user_id = user_id
        self.run_id = run_id
        #: The live run this ledger run mirrors as a shadow run, if any.
        self.mirror = mirror
        #: How long an approved call waits for the ledger to show the approver's decision.
        self.approval_wait = approval_wait
        self._run: AsyncRun | None = None
        #: The ledger's first answers, by tool-call id, from ``needs_approval`` to the call.
        self._answers: dict[str, _Asked] = {}

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

    async def _held_for_a_human(self, name: str, tool_input: dict[str, Any], call_id: str) -> bool:
        """Whether the ledger answers this call ``approval_required``; any other answer is
        kept for the call itself, so the ledger is asked once."""
        run = await self.ledger_run()
        answer = await self.ledger.ask(run.run_id, name, tool_input, step_id=call_id)
        if _decision(answer) == "approval_required":
            return True
        self._answers[call_id] = _Asked(name, tool_input, answer)
        return False

    def _wrapped(self, tool: FunctionTool) -> FunctionTool:
        # The SDK turns a tool's exception into a message for the model by default, which
        # would report a timeout as success; this copy raises, so it is reported uncertain.
        raw = dataclasses.replace(
            tool, _failure_error_function=None, _use_default_failure_error_function=False
        )

        async def needs_approval(
            ctx: RunContextWrapper[Any], tool_input: dict[str, Any], call_id: str
        ) -> bool:
            return await self._held_for_a_human(tool.name, tool_input, call_id)

        async def invoke(ctx: ToolContext[Any], arguments: str) -> str:
            run = await self.ledger_run()
            parsed = _json_object(arguments)
            tool_input = parsed if parsed is not None else {"arguments": arguments}

            async def execute(call: CallContext) -> Any:
                if parsed is None:
                    raise InvalidToolInput("the arguments are not a JSON object")
                return await raw.on_invoke_tool(ctx, arguments)

            asked = self._answers.pop(ctx.tool_call_id, None)
            observation = await run.call(
                tool.name,
                tool_input,
                execute=execute,
                answer=asked.answer if asked is not None else None,
                step_id=ctx.tool_call_id,
                approval_deadline=self.approval_wait,
            )
            return model_text(observation)

        return dataclasses.replace(tool, on_invoke_tool=invoke, needs_approval=needs_approval)


def _json_object(arguments: str) -> dict[str, Any] | None:
    """The model's arguments as an object, or None when they are not one."""
    try:
        parsed = json.loads(arguments or "{}")
    except ValueError:
        return None
    return parsed if isinstance(parsed, dict) else None
