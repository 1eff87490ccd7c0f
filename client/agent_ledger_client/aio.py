"""The asyncio driver: the same operations as ``LedgerClient``, for ``async`` runtimes.

    async with AsyncLedgerClient(url, token) as client, client.run(user_id="u-42") as run:
        observation = await run.call("send_email", {...}, execute=send)

``execute`` may be a coroutine function or a plain one (run in a thread). Cancelling the task
of a call while its tool runs reports the call uncertain (a short, shielded report) before the
``CancelledError`` goes on, so a retry gets ``SIDE_EFFECT_UNCERTAIN`` at once instead of
waiting for the lease to lapse.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any, TypeVar

import httpx

from agent_ledger_client import protocol as p
from agent_ledger_client.mirroring import Mirror
from agent_ledger_client.surface import Surface, http_arguments

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
        mirroring that live run (its side-effecting calls never execute)."""
        data = await self.drive(
            self.protocol.start_run(
                user_id=user_id,
                run_id=run_id,
                combination_id=combination_id,
                shadow_of=shadow_of,
            )
        )
        return AsyncRun(self, data)

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
