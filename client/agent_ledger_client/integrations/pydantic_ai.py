"""Pydantic AI: a toolset whose every tool call goes through the ledger.

    toolset = LedgerToolset(FunctionToolset([create_order]), ledger=ledger, user_id="user-7")
    agent = Agent(model, toolsets=[toolset], output_type=[str, DeferredToolRequests])

``RunContext.tool_call_id`` is the step id; the conversation (``RunContext.conversation_id``,
or the agent run) is the ledger run, unless ``run_id`` names one. The arguments reach the ledger
after Pydantic AI validated them (invalid ones go back to the model as a retry, no side
effect). ``APPROVAL_REQUIRED`` becomes a deferred tool call (``ApprovalRequired``, with the
observation in its metadata); run the agent again with ``DeferredToolResults(approvals=...)``
once the approver has decided in the ledger, and the call runs if the ledger shows it approved.
Failures and refusals come back to the model as the observation.

With ``mirror`` (a live run's ``run.mirror``) the ledger run is the shadow run mirroring that
live run (named ``mirror.run_id`` unless ``run_id`` names it): run the candidate agent on the
live run's input; its reads run, and each side-effecting tool call comes back to the model as
the ledger's ``SHADOW_DRY_RUN`` observation without the tool running.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pydantic_ai import ApprovalRequired, RunContext
from pydantic_ai.toolsets import WrapperToolset
from pydantic_ai.toolsets.abstract import ToolsetTool

from agent_ledger_client.aio import AsyncLedgerClient, AsyncRun
from agent_ledger_client.mirroring import Mirror, pinning
from agent_ledger_client.protocol import CallContext


@dataclass
class LedgerToolset(WrapperToolset[Any]):
    """Wraps a toolset so each call is recorded, decided and reported by the ledger."""

    ledger: AsyncLedgerClient = field(kw_only=True)
    user_id: str = field(kw_only=True)
    run_id: str | None = field(default=None, kw_only=True)
    #: The live run this toolset's ledger run mirrors as a shadow run, if any.
    mirror: Mirror | None = field(default=None, kw_only=True)
    #: How long a call the user approved waits for the ledger to show the approval.
    approval_wait: float = field(default=30.0, kw_only=True)
    #: The ledger runs started, by run id (shared with the copies Pydantic AI makes per run).
    runs: dict[str, AsyncRun] = field(default_factory=dict, kw_only=True, repr=False)

    async def ledger_run(self, ctx: RunContext[Any]) -> AsyncRun:
        """The ledger run of this conversation, started once."""
        shadow_id = self.mirror.run_id if self.mirror else None
        run_id = self.run_id or shadow_id or ctx.conversation_id or ctx.run_id
        if not run_id:
            raise ValueError("the agent run has no id to name its ledger run; pass run_id")
        if run_id not in self.runs:
            self.runs[run_id] = await self.ledger.start_run(
                user_id=self.user_id, run_id=run_id, **pinning(self.mirror)
            )
        return self.runs[run_id]

    async def finish(self, termination_reason: str = "completed") -> None:
        """End the ledger runs this toolset started."""
        started = list(self.runs.values())
        self.runs.clear()
        for run in started:
            await run.finish(termination_reason)

    async def call_tool(
        self,
        name: str,
        tool_args: dict[str, Any],
        ctx: RunContext[Any],
        tool: ToolsetTool[Any],
    ) -> Any:
        run = await self.ledger_run(ctx)

        async def execute(call: CallContext) -> Any:
            return await self.wrapped.call_tool(name, tool_args, ctx, tool)

        options: dict[str, Any] = {"step_id": ctx.tool_call_id, "wait_for_approval": False}
        observation = await run.call(name, tool_args, execute=execute, **options)
        if observation.get("code") == "APPROVAL_REQUIRED":
            if not ctx.tool_call_approved:
                raise ApprovalRequired(metadata={"ledger": observation})
            options.update(wait_for_approval=True, approval_deadline=self.approval_wait)
            observation = await run.call(name, tool_args, execute=execute, **options)
        if observation.get("ok") and observation.get("code") is None:
            return observation.get("content")
        return observation
