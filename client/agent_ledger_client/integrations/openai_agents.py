"""OpenAI Agents SDK: function tools whose every call goes through the ledger.

    ledger_tools = LedgerFunctionTools(ledger, user_id="user-7", run_id="conversation-1")
    agent = Agent(name="shop", tools=ledger_tools.wrap([create_order]))
    result = await Runner.run(agent, "order cart-42")
    await ledger_tools.finish()

``ToolContext.tool_call_id`` is the step id; one ``LedgerFunctionTools`` is one ledger run.
Arguments that are not a JSON object are a failed call with no side effect; a tool's exception
is reported to the ledger (uncertain, or failed for a ``ToolError``) rather than turned into a
message that reads like success. A call the ledger holds
for a human waits for the decision up to ``approval_deadline`` inside the tool and the model
gets the outcome (the approved result, ``APPROVAL_REJECTED`` or ``APPROVAL_REQUIRED``).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from typing import Any

from agents import FunctionTool
from agents.tool_context import ToolContext

from agent_ledger_client.aio import AsyncLedgerClient, AsyncRun
from agent_ledger_client.errors import InvalidToolInput
from agent_ledger_client.observations import model_text
from agent_ledger_client.protocol import DEFAULT_APPROVAL_DEADLINE, CallContext


class LedgerFunctionTools:
    """Wraps function tools so each call is recorded, decided and reported by the ledger."""

    def __init__(
        self,
        ledger: AsyncLedgerClient,
        *,
        user_id: str,
        run_id: str,
        approval_deadline: float = DEFAULT_APPROVAL_DEADLINE,
    ) -> None:
        self.ledger = ledger
        self.user_id = user_id
        self.run_id = run_id
        self.approval_deadline = approval_deadline
        self._run: AsyncRun | None = None

    async def ledger_run(self) -> AsyncRun:
        """The ledger run, started once (starting is idempotent by run id)."""
        if self._run is None:
            self._run = await self.ledger.start_run(user_id=self.user_id, run_id=self.run_id)
        return self._run

    async def finish(self, termination_reason: str = "completed") -> None:
        """End the ledger run."""
        await (await self.ledger_run()).finish(termination_reason)
        self._run = None

    def wrap(self, tools: Sequence[FunctionTool]) -> list[FunctionTool]:
        """The same tools, each call going through the ledger."""
        return [self._wrapped(tool) for tool in tools]

    def _wrapped(self, tool: FunctionTool) -> FunctionTool:
        # The SDK turns a tool's exception into a message for the model by default, which
        # would report a timeout as success; this copy raises, so it is reported uncertain.
        raw = dataclasses.replace(
            tool, _failure_error_function=None, _use_default_failure_error_function=False
        )

        async def invoke(ctx: ToolContext[Any], arguments: str) -> str:
            run = await self.ledger_run()
            try:
                tool_input = json.loads(arguments or "{}")
            except ValueError:
                tool_input = None
            if not isinstance(tool_input, dict):
                tool_input = {"arguments": arguments}

            async def execute(call: CallContext) -> Any:
                if "arguments" in tool_input and len(tool_input) == 1:
                    raise InvalidToolInput("the arguments are not a JSON object")
                return await raw.on_invoke_tool(ctx, arguments)

            observation = await run.call(
                tool.name,
                tool_input,
                execute=execute,
                step_id=ctx.tool_call_id,
                approval_deadline=self.approval_deadline,
            )
            return model_text(observation)

        return dataclasses.replace(tool, on_invoke_tool=invoke)
