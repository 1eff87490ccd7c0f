"""LangGraph / LangChain: every tool call of a ``ToolNode`` goes through the ledger.

    calls = LedgerToolCalls(ledger, user_id="user-7", approver=approver)
    tools = ToolNode([create_order], awrap_tool_call=calls)   # @tool functions or BaseTools
    ...
    await graph.ainvoke(state, config)                        # config names the thread
    await calls.finish(config)                                # the thread's ledger run ends

The model's tool-call id is the step id; a graph thread is one ledger run (started at its
first tool call, finished by ``finish``). A call the model re-plans (a new tool-call id, the
same arguments) is the same action: it gets the recorded result, or ``SIDE_EFFECT_UNCERTAIN``.

**Errors.** The ledger hears how the tool ended before the node's error handling
(``handle_tool_errors``) or the tool's own (``handle_tool_error``) turns an exception into a
message: a timeout, a lost connection, any exception but a ``ToolError``, or a cancel, is
uncertain, and the model gets the ledger's observation, never "Please fix your mistakes". A
``ToolError`` is the tool's failure; arguments the tool's schema refuses are a failed call
with no side effect, checked before the tool runs.

**Approvals.** A call the ledger holds for a human (``APPROVAL_REQUIRED``) becomes LangGraph's
``interrupt`` with ``{"ledger": observation, "tool_call": call}``: the observation carries the
ledger's ``metadata.approval_id`` and the policy's reason. Resume the graph with the
approver's decision, ``Command(resume={"approve": True})`` or ``Command(resume={"approve":
False, "reason": "..."})``: with an ``approver`` client (a person with the approver role, none
of the action's principals) it is forwarded to the ledger. Rejected, the call never runs and
the model is told the reason; approved, it runs once the ledger's approval is given too
(forwarded, or decided in the console, waited for up to ``approval_wait`` seconds). Any other
resume value leaves the decision to the ledger's approvers. The held call is started with the
arguments the node resumes with: another input than the approved action's (the tool call
edited while the graph waited) is refused by the ledger and nothing runs. A decision that
names an ``approval_id`` other than the held call's is refused alike.

**A thread resumed after its process died.** With a store (``graph.compile(store=...)``), the
adapter keeps each call it starts in the store (its ledger call id and fencing token) until
its outcome is reported, and each call held for a human until it is resumed. LangGraph writes
a node's state only when the node finishes, so the checkpoint cannot say that a call started;
the store is written at once. When a thread is resumed and the tool node runs a tool call that
another process started and never reported (killed mid-call), that call is reported uncertain
at once instead of after its lease lapses, and the model gets ``SIDE_EFFECT_UNCERTAIN``.
Without a store the ledger learns it when the lease lapses.

With ``mirror`` (a live run's ``run.mirror``), the graph's thread is the shadow run mirroring
that live run: run the candidate graph on the live run's input under the thread
``mirror.run_id``; its reads run, and each side-effecting tool call comes back to the model as
the ledger's ``SHADOW_DRY_RUN`` observation without the tool running.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from langchain_core.messages import ToolMessage
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import BaseTool
from langgraph.prebuilt.tool_node import ToolCallRequest
from langgraph.store.base import BaseStore
from langgraph.types import Command, interrupt
from pydantic import BaseModel, Field, ValidationError

from agent_ledger_client.aio import AsyncLedgerClient, AsyncRun
from agent_ledger_client.errors import (
    InvalidToolInput,
    LedgerRequestError,
    LedgerUnavailableError,
    ToolError,
)
from agent_ledger_client.integrations.approvals import (
    Approver,
    Decision,
    approval_id,
    approved,
    is_held,
    rejected,
)
from agent_ledger_client.mirroring import Mirror, pinning
from agent_ledger_client.observations import model_text, start_refused
from agent_ledger_client.protocol import CallContext, default_step_id

ToolCallHandler = Callable[[ToolCallRequest], Awaitable[ToolMessage | Command]]

#: This process, as the calls it starts are journalled: a resumed thread finding a call that
#: another process started and never reported knows that process is gone (LangGraph runs a
#: thread in one process at a time).
PROCESS = uuid.uuid4().hex
#: The store namespace of the journal.
JOURNAL = ("agent_ledger", "calls")


def thread_of(config: RunnableConfig | None) -> str:
    """The thread id of a graph run's config (the ledger run id)."""
    thread = ((config or {}).get("configurable") or {}).get("thread_id")
    if not thread:
        raise ValueError("the graph's config needs a configurable thread_id (the ledger run)")
    return str(thread)


class _Watched(BaseTool):
    """The tool as the ``ToolNode`` runs it, keeping what it raised: the node's error handling
    turns an exception into a message, and the ledger must tell a tool's failure from a lost
    answer."""

    tool: BaseTool
    raised: list[BaseException] = Field(default_factory=list)

    def _run(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError("the ToolNode calls invoke or ainvoke")

    def invoke(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any) -> Any:
        try:
            return self.tool.invoke(input, config, **kwargs)
        except BaseException as exc:
            self.raised.append(exc)
            raise

    async def ainvoke(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any) -> Any:
        try:
            return await self.tool.ainvoke(input, config, **kwargs)
        except BaseException as exc:
            self.raised.append(exc)
            raise


def _watched(tool: BaseTool) -> _Watched:
    """``tool`` with its own error handling off, so every exception reaches the watcher."""
    own = tool.model_copy(update={"handle_tool_error": False, "handle_validation_error": False})
    return _Watched(
        name=tool.name, description=tool.description, args_schema=tool.args_schema, tool=own
    )


def _refusal(tool: BaseTool, arguments: dict[str, Any]) -> str | None:
    """Why the tool's schema refuses the model's arguments, or None: checked before the tool
    runs, so only a refusal found here is a failure with no side effect."""
    schema = tool.tool_call_schema
    if isinstance(schema, type) and issubclass(schema, BaseModel):
        try:
            schema.model_validate(arguments)
        except ValidationError as exc:
            return str(exc)
    return None


def _decision(resumed: Any) -> Decision | None:
    """The approver's decision in a resume value, or None when it holds none."""
    if isinstance(resumed, dict) and isinstance(resumed.get("approve"), bool):
        return Decision(resumed["approve"], str(resumed.get("reason") or ""))
    return None


class _Journal:
    """A thread's calls in flight: those started and not yet reported, and those held for a
    human. In the graph's store when it has one (it outlives the process), else in memory."""

    def __init__(self, store: BaseStore | None, memory: dict[str, Any], thread: str) -> None:
        self.store = store
        self.memory = memory
        self.thread = thread

    def _key(self, tool_call_id: str, kind: str) -> str:
        return f"{self.thread}/{tool_call_id}/{kind}"

    async def get(self, tool_call_id: str, kind: str) -> dict[str, Any] | None:
        key = self._key(tool_call_id, kind)
        if self.store is None:
            return self.memory.get(key)
        item = await self.store.aget(JOURNAL, key)
        return dict(item.value) if item is not None else None

    async def put(self, tool_call_id: str, kind: str, value: dict[str, Any]) -> None:
        key = self._key(tool_call_id, kind)
        if self.store is None:
            self.memory[key] = value
        else:
            await self.store.aput(JOURNAL, key, value, index=False)

    async def delete(self, tool_call_id: str, kind: str) -> None:
        key = self._key(tool_call_id, kind)
        if self.store is None:
            self.memory.pop(key, None)
        else:
            await self.store.adelete(JOURNAL, key)


class LedgerToolCalls:
    """A ``ToolNode`` wrapper (``awrap_tool_call``) that sends each tool call through the
    ledger."""

    def __init__(
        self,
        ledger: AsyncLedgerClient,
        *,
        user_id: str,
        approver: Approver | None = None,
        approval_wait: float = 30.0,
        mirror: Mirror | None = None,
        **call_options: Any,
    ) -> None:
        self.ledger = ledger
        self.user_id = user_id
        #: A person's client (approver role) through which a decision in a resume value
        #: reaches the ledger; None: the ledger's approvers decide in its console.
        self.approver = approver
        #: The live run this graph's thread mirrors as a shadow run, if any.
        self.mirror = mirror
        #: How long a resumed call waits for the ledger to show the approval.
        self.approval_wait = approval_wait
        self.call_options = call_options
        self._runs: dict[str, AsyncRun] = {}
        self._journal_memory: dict[str, Any] = {}

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
        runtime = request.runtime
        thread = thread_of(runtime.config if runtime else None)
        run = await self.run_for(thread)
        journal = _Journal(runtime.store if runtime else None, self._journal_memory, thread)
        # The model's tool-call id is the step id (and names the call in the journal).
        step = call["id"] or default_step_id(call["name"])
        await self._settle_left(journal, step)
        arguments = dict(call["args"])
        started: list[CallContext] = []

        async def run_tool(ctx: CallContext) -> Any:
            if request.tool is None:
                refused = await execute(request)  # the node's own answer: nothing runs
                raise InvalidToolInput(str(getattr(refused, "content", "not a tool")))
            refusal = _refusal(request.tool, ctx.input)
            if refusal is not None:
                raise InvalidToolInput(refusal)
            started.append(ctx)
            record = {"call_id": ctx.call_id, "fencing_token": ctx.fencing_token}
            await journal.put(step, "started", {**record, "process": PROCESS})
            watched = _watched(request.tool)
            message = await execute(request.override(tool=watched))
            if watched.raised:
                raise watched.raised[-1]
            if not isinstance(message, ToolMessage):
                raise TypeError("a tool that returns a Command cannot go through the ledger")
            if message.status == "error":  # the tool's own answer that it failed
                raise ToolError("TOOL_ERROR", str(message.content))
            return message.content

        try:
            held = await journal.get(step, "held")
            if held is None:
                options = {**self.call_options, "step_id": step, "wait_for_approval": False}
                observation = await run.call(call["name"], arguments, execute=run_tool, **options)
                if not is_held(observation):
                    return _message(call, observation)
                held = observation
                await journal.put(step, "held", held)
            resumed = interrupt({"ledger": held, "tool_call": call})
            observation = await self._decided(held, resumed, call["name"], arguments, run_tool)
            await journal.delete(step, "held")
            return _message(call, observation)
        finally:
            if started:
                await journal.delete(step, "started")

    async def _decided(
        self,
        held: dict[str, Any],
        resumed: Any,
        tool: str,
        arguments: dict[str, Any],
        run_tool: Callable[[CallContext], Awaitable[Any]],
    ) -> dict[str, Any]:
        """The observation for a held call once the graph is resumed with ``resumed``."""
        named = resumed.get("approval_id") if isinstance(resumed, dict) else None
        if named is not None and named != approval_id(held):
            detail = f"the decision was given for approval {named}, not this call's"
            return start_refused(tool, {"code": "IDEMPOTENCY_KEY_CONFLICT", "detail": detail})
        decision = _decision(resumed)
        if decision is not None and not decision.approve:
            return await rejected(
                self.ledger, held, tool=tool, reason=decision.reason, approver=self.approver
            )
        return await approved(
            self.ledger,
            held,
            tool_input=arguments,
            execute=run_tool,
            approver=self.approver if decision is not None else None,
            wait=self.approval_wait,
            **self.call_options,
        )

    async def _settle_left(self, journal: _Journal, tool_call_id: str) -> None:
        """Report uncertain at once a call of this tool call that another process started and
        never reported: that process is gone, and its lease would only lapse later."""
        left = await journal.get(tool_call_id, "started")
        if left is None or left.get("process") == PROCESS:
            return
        report = {"fencing_token": left["fencing_token"], "outcome": "uncertain"}
        try:
            await self.ledger.request("POST", f"/calls/{left['call_id']}/complete", json=report)
        except LedgerRequestError:
            pass  # the ledger has settled it already (a lapsed lease, a look-up)
        except LedgerUnavailableError:
            return  # kept for the next attempt; the call itself fails closed
        await journal.delete(tool_call_id, "started")


def _message(call: Any, observation: dict[str, Any]) -> ToolMessage:
    return ToolMessage(
        content=model_text(observation),
        tool_call_id=call["id"],
        name=call["name"],
        status="success" if observation.get("ok") else "error",
        artifact=observation,
    )
