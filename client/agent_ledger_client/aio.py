"""The asyncio driver: the same operations as ``LedgerClient``, for ``async`` runtimes.

    async with AsyncLedgerClient(url, token) as client, client.run(user_id="u-42") as run:
        observation = await run.call("send_email", {...}, execute=send)

``execute`` may be a coroutine function or a plain one (run in a thread). Cancelling the task
of a call while its tool runs reports the call uncertain (a short, shielded report) before the
``CancelledError`` goes on, so a retry gets ``SIDE_EFFECT_UNCERTAIN`` at once instead of
waiting for the lease to lapse.

Calls started together (a model turn's parallel tool calls, which the frameworks run as tasks
of one ``gather``) are asked about in one ``POST /calls/batch``: the ledger decides each as it
would alone, and the turn costs it about what two calls alone do. Nothing waits for a batch
to fill: the calls asked in one pass of the event loop go together (``_Turns``).
"""

from __future__ import annotations

import asyncio
import contextvars
import inspect
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from functools import cached_property, partial
from typing import Any, TypeVar

import httpx

from agent_ledger_client import protocol as p
from agent_ledger_client.mirroring import Mirror
from agent_ledger_client.surface import Surface, http_arguments, trace_headers

T = TypeVar("T")


class AsyncLedgerClient(Surface):
    """A tenant's connection to Agent Ledger, for asyncio: every operation is a coroutine."""

    _http: httpx.AsyncClient

    def _open(self, transport: httpx.AsyncBaseTransport | None) -> httpx.AsyncClient:
        return httpx.AsyncClient(base_url=self.api_url, headers=self.headers, transport=transport)

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> AsyncLedgerClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def start_run(
        self,
        *,
        user_id: str,
        run_id: str | None = None,
        combination_id: int | None = None,
        shadow_of: str | None = None,
    ) -> AsyncRun:
        """Start a run (idempotent for a given ``run_id``); with ``shadow_of``, a shadow run
        mirroring that live run (its side-effecting calls never execute). Tasks that start one
        ``run_id`` at once (a turn's tool calls, each finding its run not started yet) share one
        request, and so go on together; without a ``run_id`` each start is a new run."""
        start: dict[str, Any] = {
            "user_id": user_id,
            "run_id": run_id,
            "combination_id": combination_id,
            "shadow_of": shadow_of,
        }
        if run_id is None:  # a new run each time
            return AsyncRun(self, await self.drive(self.protocol.start_run(**start)))
        key = tuple(start.items())
        starting = self._starting.get(key)
        if starting is None or starting.get_loop() is not asyncio.get_running_loop():
            starting = asyncio.ensure_future(self.drive(self.protocol.start_run(**start)))
            self._starting[key] = starting
            starting.add_done_callback(partial(self._started, key))
        # A caller cancelled while it waits leaves the start to the others.
        return AsyncRun(self, await asyncio.shield(starting))

    def _started(self, key: tuple[Any, ...], done: asyncio.Future[dict[str, Any]]) -> None:
        if self._starting.get(key) is done:
            del self._starting[key]
        if not done.cancelled():
            done.exception()  # raised to each caller; retrieved here for one no caller awaited

    @asynccontextmanager
    async def run(self, **start: Any) -> AsyncIterator[AsyncRun]:
        """A run (``start_run``'s arguments) finished when the block ends; a cancelled or
        failed block finishes it with the error's type, shielded from the cancel."""
        run = await self.start_run(**start)
        try:
            yield run
        except BaseException as exc:
            await asyncio.shield(run.finish(f"error: {type(exc).__name__}"))
            raise
        await run.finish("completed")

    async def mirror(
        self, live: AsyncRun, agent: Callable[[AsyncRun], Awaitable[Any]]
    ) -> AsyncRun | None:
        """``LedgerClient.mirror`` for asyncio: ``agent`` is a coroutine function."""
        mirror = live.mirror
        if mirror is None:
            return None
        async with self.run(**mirror.start) as shadow:
            await agent(shadow)
        return shadow

    # --- the driver -------------------------------------------------------------------------
    async def drive(self, flow: p.Flow[T]) -> T:
        """Perform the flow's actions until it returns; a cancel while the tool runs is
        reported uncertain (shielded, briefly) and then re-raised."""
        reply: p.Reply = None
        try:
            while True:
                action = flow.send(reply)
                try:
                    reply = await self._perform(action)
                except BaseException as exc:
                    if isinstance(action, p.Execute):
                        await asyncio.shield(self._settle(flow, p.executed_after(exc)))
                    raise
        except StopIteration as done:
            return done.value

    async def _settle(self, flow: p.Flow[Any], reply: p.Reply) -> None:
        """Send a cancelled call's report; nothing runs again."""
        try:
            while not isinstance(action := flow.send(reply), p.Execute):
                reply = await self._perform(action)
        except StopIteration:
            return
        flow.close()

    async def _perform(self, action: p.Action) -> p.Reply:
        if isinstance(action, p.Send):
            return await self._send(action.request)
        if isinstance(action, p.Sleep):
            await asyncio.sleep(action.seconds)
            return None
        return await self._execute(action)

    async def _send(self, request: p.Request) -> p.Response | p.TransportFailure:
        if p.first_ask(request):
            return await self._turns.ask(request)
        return await self._send_alone(request)

    @cached_property
    def _turns(self) -> _Turns:
        return _Turns(self._send_alone)

    @cached_property
    def _starting(self) -> dict[tuple[Any, ...], asyncio.Future[dict[str, Any]]]:
        """The runs being started, by what starts them (``start_run``)."""
        return {}

    async def _send_alone(self, request: p.Request) -> p.Response | p.TransportFailure:
        try:
            response = await self._http.request(**http_arguments(request))
        except httpx.TransportError as exc:
            return p.TransportFailure(str(exc) or type(exc).__name__)
        return p.response_of(response.status_code, response.headers, response.content)

    async def _execute(self, action: p.Execute) -> p.Executed:
        beat = asyncio.create_task(self._heartbeat(action)) if action.heartbeat_every else None
        try:
            result = await asyncio.wait_for(_started(action), action.timeout)
            return p.Executed("succeeded", result)
        except Exception as exc:
            return p.executed_after(exc)
        finally:
            if beat is not None:
                beat.cancel()

    async def _heartbeat(self, action: p.Execute) -> None:
        every = action.heartbeat_every
        while every is not None:
            await asyncio.sleep(every)
            request = p.heartbeat_request(action.context, self.protocol.request_timeout)
            every = p.next_heartbeat(await self._send(request), every)


Send = Callable[[p.Request], Awaitable[p.Response | p.TransportFailure]]


class _Turns:
    """The new calls asked in one pass of the event loop (the tool calls a framework starts at
    once for one model turn), sent as one ``POST /calls/batch``: once the tasks ready now have
    run, the calls asked under one trace context go together. No time is waited for: a call
    asked alone goes alone, at once, as ``POST /calls``."""

    def __init__(self, send: Send) -> None:
        self.send = send
        self.waiting: dict[Any, list[tuple[p.Request, asyncio.Future[Any]]]] = {}
        self.sending: set[asyncio.Task[None]] = set()
        self.batches = True  # False once the ledger turned a batch away as unknown

    async def ask(self, request: p.Request) -> p.Response | p.TransportFailure:
        try:
            json.dumps(request.json)
        except (TypeError, ValueError):  # fails alone, as it would without a batch
            return await self.send(request)
        loop = asyncio.get_running_loop()
        key = (loop, request.traceparent, tuple(sorted(trace_headers().items())))
        turn = self.waiting.setdefault(key, [])
        if not turn:  # the first of its turn: the turn is sent in this caller's trace context
            for closed in [waiting for waiting in self.waiting if waiting[0].is_closed()]:
                del self.waiting[closed]  # asked on a loop that closed before its turn left
            loop.call_soon(self._send_turn, key, contextvars.copy_context())
        answer: asyncio.Future[p.Response | p.TransportFailure] = loop.create_future()
        turn.append((request, answer))
        return await answer

    def _send_turn(self, key: Any, context: contextvars.Context) -> None:
        # A caller cancelled before its turn left asks nothing: its call is not sent.
        turn = [(request, answer) for request, answer in self.waiting.pop(key) if not answer.done()]
        if not turn:
            return
        task = asyncio.get_running_loop().create_task(self._answer(turn), context=context)
        self.sending.add(task)
        task.add_done_callback(self.sending.discard)

    async def _answer(self, turn: list[tuple[p.Request, asyncio.Future[Any]]]) -> None:
        """Send a turn's calls and hand each caller its reply (a caller cancelled meanwhile
        has none to take)."""
        try:
            replies = await self._replies([request for request, _answer in turn])
        except asyncio.CancelledError:  # the loop is closing
            for _request, answer in turn:
                answer.cancel()
            raise
        except Exception as exc:
            for _request, answer in turn:
                if not answer.done():
                    answer.set_exception(exc)
            return
        for (_request, answer), reply in zip(turn, replies, strict=True):
            if not answer.done():
                answer.set_result(reply)

    async def _replies(self, requests: list[p.Request]) -> list[p.Response | p.TransportFailure]:
        """Each request's reply: one alone as it is; more in batches of at most
        ``MAX_BATCH_CALLS``, in order, or one by one when the ledger refuses the batch."""
        replies: list[p.Response | p.TransportFailure] = []
        for start in range(0, len(requests), p.MAX_BATCH_CALLS):
            chunk = requests[start : start + p.MAX_BATCH_CALLS]
            split = None
            if len(chunk) > 1 and self.batches:
                reply = await self.send(p.batch_request(chunk))
                self.batches = not p.without_batches(reply)
                split = p.batch_replies(reply, len(chunk))
            if split is None:
                split = list(await asyncio.gather(*map(self.send, chunk)))
            replies += split
        return replies


async def _started(action: p.Execute) -> Any:
    """The tool's result: a coroutine function is awaited, a plain one runs in a thread."""
    if inspect.iscoroutinefunction(action.execute):
        return await action.execute(action.context)
    result = await asyncio.to_thread(action.execute, action.context)
    return await result if inspect.isawaitable(result) else result


class AsyncRun:
    """A run of an agent, for asyncio: every call goes through ``call``."""

    def __init__(self, client: AsyncLedgerClient, data: dict[str, Any]) -> None:
        self.client = client
        self.data = data
        self.run_id: str = data["run_id"]

    @property
    def mirror(self) -> Mirror | None:
        """The shadow run the ledger asks to mirror this live run with, or None."""
        return Mirror.of(self.data)

    async def call(
        self,
        tool: str,
        tool_input: dict[str, Any],
        *,
        execute: Callable[[p.CallContext], Awaitable[Any] | Any],
        **options: Any,
    ) -> dict[str, Any]:
        """``AsyncLedgerClient.call`` in this run."""
        return await self.client.call(self.run_id, tool, tool_input, execute=execute, **options)

    async def finish(self, termination_reason: str) -> dict[str, Any]:
        return await self.client.finish_run(self.run_id, termination_reason)
