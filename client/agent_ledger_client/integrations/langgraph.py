"""LangGraph / LangChain: every tool call of a ``ToolNode`` goes through the ledger.

    calls = LedgerToolCalls(ledger, user_id="user-7")
    tools = ToolNode([create_order], awrap_tool_call=calls)   # @tool functions or BaseTools
    ...
    await graph.ainvoke(state, config)                        # config names the thread
    await calls.finish(config)                                # the thread's ledger run ends

The model's tool-call id is the step id; a graph thread is one ledger run (started at its
first tool call, finished by ``finish``). ``APPROVAL_REQUIRED`` becomes a LangGraph
``interrupt`` carrying the observation; when the graph is resumed (``Command(resume=...)``)
after the approver decided in the ledger, the call runs if it was approved, or the model gets
``APPROVAL_REJECTED`` with the reason. A resumed graph gets recorded results, not re-execution.
A tool's arguments refused by its schema are a failed call with no side effect.

With ``mirror`` (a live run's ``run.mirror``), the graph's thread is the shadow run mirroring
that live run: run the candidate graph on the live run's input under the thread
``mirror.run_id``; its reads run, and each side-effecting tool call comes back to the model as
the ledger's ``SHADOW_DRY_RUN`` observation without the tool running.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from langchain_core.messages import ToolMessage
from langchain_core.runnables import RunnableConfig
from langgraph.prebuilt.tool_node import ToolCallRequest
from langgraph.types import Command, interrupt

from agent_ledger_client.aio import AsyncLedgerClient, AsyncRun
from agent_ledger_client.errors import InvalidToolInput
from agent_ledger_client.mirroring import Mirror, pinning
from agent_ledger_client.observations import model_text
from agent_ledger_client.protocol import CallContext

ToolCallHandler = Callable[[ToolCallRequest], Awaitable[ToolMessage | Command]]


def thread_of(config: RunnableConfig | None) -> str:
    """The thread id of a graph run's config (the ledger run id)."""
    thread = ((config or {}).get("configurable") or {}).get("thread_id")
    if not thread:
        raise ValueError("the graph's config needs a configurable thread_id (the ledger run)")
    return str(thread)


class LedgerToolCalls:
    """A ``ToolNode`` wrapper (``awrap_tool_call``) that sends each tool call through the
    ledger."""

    def __init__(
        self,
        ledger: AsyncLedgerClient,
        *,
        user_id: str,
        approval_wait: float = 30.0,
        mirror: Mirror | None = None,
        **call_options: Any,
    ) -> None:
        self.ledger = ledger
        self.user_id = user_id
        #: The live run this graph's thread mirrors as a shadow run, if any.
        self.mirror = mirror
        #: How long a resumed graph waits for the ledger to show the approver's decision.
        self.approval_wait = approval_wait
        self.call_options = call_options
        self._runs: dict[str, AsyncRun] = {}

    async def run_for(self, thread_id: str) -> AsyncRun:
        """The thread's ledger run, started once (starting is idempotent by run id)."""
        if thread_id not in self._runs:
            self._runs[thread_id] = await self._start(thread_id)
        return self._runs[thread_id]

    async def _start(self, thread_id: str) -> AsyncRun:
        return await self.ledger.start_run(
            user_id=self.user_id, run_id=thread_id, **pinning(self.mirror)
        )

    async def finish(
        self, config: RunnableConfig | str, termination_reason: str = "completed"
    ) -> None:
        """End the thread's ledger run (when its graph run is over)."""
        thread_id = config if isinstance(config, str) else thread_of(config)
        run = self._runs.pop(thread_id, None)
        if run is None:  # no tool call in this process: the run is found by its id
            run = await self._start(thread_id)
        await run.finish(termination_reason)

    async def __call__(
        self, request: ToolCallRequest, execute: ToolCallHandler
    ) -> ToolMessage | Command:
        call = request.tool_call
        run = await self.run_for(thread_of(request.runtime.config if request.runtime else None))

        async def run_tool(ctx: CallContext) -> Any:
            message = await execute(request)
            if not isinstance(message, ToolMessage):
                raise InvalidToolInput("a tool that returns a Command cannot go through the ledger")
            if message.status == "error":
                # The ToolNode turns only argument validation errors into error messages.
                raise InvalidToolInput(str(message.content))
            return message.content

        arguments = dict(call["args"])
        options = {**self.call_options, "step_id": call["id"], "wait_for_approval": False}
        observation = await run.call(call["name"], arguments, execute=run_tool, **options)
        if observation.get("code") == "APPROVAL_REQUIRED":
            interrupt({"ledger": observation, "tool_call": call})
            # Resumed: the approver has decided in the ledger; run it if approved.
            options.update(wait_for_approval=True, approval_deadline=self.approval_wait)
            observation = await run.call(call["name"], arguments, execute=run_tool, **options)
        return ToolMessage(
            content=model_text(observation),
            tool_call_id=call["id"],
            name=call["name"],
            status="success" if observation.get("ok") else "error",
            artifact=observation,
        )
