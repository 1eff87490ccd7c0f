"""Pydantic AI: a toolset whose every tool call goes through the ledger.

    toolset = LedgerToolset(FunctionToolset([create_order]), ledger=ledger, user_id="user-7")
    agent = Agent(model, toolsets=[toolset], output_type=[str, DeferredToolRequests])

``RunContext.tool_call_id`` is the step id; the conversation (``RunContext.conversation_id``,
or the agent run) is the ledger run, unless ``run_id`` names one. The arguments reach the ledger
after Pydantic AI validated them (invalid ones go back to the model as a retry, no side
effect). A call the model re-plans (a new tool-call id, the same arguments) is the same action:
it gets the recorded result, or ``SIDE_EFFECT_UNCERTAIN``. The ledger hears how a tool ended
before Pydantic AI's error handling does: a tool that raises (``ModelRetry`` after a lost
answer included), times out or is cancelled is uncertain, a ``ToolError`` is its failure, and
the model gets the ledger's observation, never a retry prompt. Failures and refusals come back
to the model as the observation.

**Approvals.** A call the ledger holds for a human (``APPROVAL_REQUIRED``) becomes a deferred
tool call (``ApprovalRequired``), with the observation in its metadata
(``DeferredToolRequests.metadata[tool_call_id]["ledger"]``: the ledger's ``approval_id``, the
policy's reason). Run the agent again with ``DeferredToolResults(approvals=...)``:

- approved (``True``), the call runs once the ledger's approval is given too: forwarded through
  the ``approver`` client (a person with the approver role, none of the action's principals),
  or decided in the ledger's console, waited for up to ``approval_wait`` seconds. It is started
  with the arguments Pydantic AI resumes with: approved with other arguments
  (``ToolApproved(override_args=...)``), it is refused by the ledger and nothing runs;
- rejected with ``await toolset.reject(call, reason)`` (the ``ToolDenied`` to pass), it never
  runs, the rejection reaches the ledger through the approver client, and the model is told
  the reason. Pydantic AI never calls the toolset for a denied call, so a plain ``ToolDenied``
  leaves the ledger's request open for its approvers.

A tool's own gate (``requires_approval=True``) is kept: Pydantic AI defers such a call before
the ledger is asked; once approved there, a hold of the ledger's is decided by that approval
(forwarded through the approver client).

With ``mirror`` (a live run's ``run.mirror``) the ledger run is the shadow run mirroring that
live run (named ``mirror.run_id`` unless ``run_id`` names it): run the candidate agent on the
live run's input; its reads run, and each side-effecting tool call comes back to the model as
the ledger's ``SHADOW_DRY_RUN`` observation without the tool running.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pydantic_ai import ApprovalRequired, RunContext, ToolDenied
from pydantic_ai.messages import ToolCallPart
from pydantic_ai.toolsets import WrapperToolset
from pydantic_ai.toolsets.abstract import ToolsetTool

from agent_ledger_client.aio import AsyncLedgerClient, AsyncRun
from agent_ledger_client.integrations.approvals import Approver, approved, is_held, rejected
from agent_ledger_client.mirroring import Mirror, pinning
from agent_ledger_client.observations import model_text
from agent_ledger_client.protocol import CallContext, default_step_id


@dataclass
class LedgerToolset(WrapperToolset[Any]):
    """Wraps a toolset so each call is recorded, decided and reported by the ledger."""

    ledger: AsyncLedgerClient = field(kw_only=True)
    user_id: str = field(kw_only=True)
    run_id: str | None = field(default=None, kw_only=True)
    #: The live run this toolset's ledger run mirrors as a shadow run, if any.
    mirror: Mirror | None = field(default=None, kw_only=True)
    #: A person's client (approver role) through which decisions made in Pydantic AI reach
    #: the ledger; None: the ledger's approvers decide in its console.
    approver: Approver | None = field(default=None, kw_only=True)
    #: How long a call the user approved waits for the ledger to show the approval.
    approval_wait: float = field(default=30.0, kw_only=True)
    #: The ledger runs started, by run id (shared with the copies Pydantic AI makes per run).
    runs: dict[str, AsyncRun] = field(default_factory=dict, kw_only=True, repr=False)
    #: The ledger's observations of the calls it holds for a human, by tool-call id, until
    #: they are resumed (shared with the copies, like ``runs``).
    held: dict[str, dict[str, Any]] = field(default_factory=dict, kw_only=True, repr=False)

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

        step = ctx.tool_call_id or default_step_id(name)
        held = self.held.pop(step, None) if ctx.tool_call_approved else None
        if held is None:
            options = {"step_id": step, "wait_for_approval": False}
            observation = await run.call(name, tool_args, execute=execute, **options)
            if not is_held(observation):
                return _returned(observation)
            if not ctx.tool_call_approved:
                self.held[step] = observation
                raise ApprovalRequired(metadata={"ledger": observation})
            held = observation
        observation = await approved(
            self.ledger,
            held,
            tool_input=tool_args,
            execute=execute,
            approver=self.approver,
            wait=self.approval_wait,
        )
        return _returned(observation)

    async def reject(self, call: ToolCallPart, reason: str) -> ToolDenied:
        """Reject a deferred call (one of ``DeferredToolRequests.approvals``): the
        ``ToolDenied`` to pass in ``DeferredToolResults.approvals``. The call never runs; its
        ledger approval, if the ledger held it, is rejected with ``reason`` through the
        approver client, and the model reads the rejection."""
        held = self.held.pop(call.tool_call_id, None)
        observation = await rejected(
            self.ledger, held, tool=call.tool_name, reason=reason, approver=self.approver
        )
        return ToolDenied(message=model_text(observation))


def _returned(observation: dict[str, Any]) -> Any:
    """What the model gets: a success's own result, else the observation."""
    if observation.get("ok") and observation.get("code") is None:
        return observation.get("content")
    return observation
