"""A TCP proxy between the service and PostgreSQL that a drill can slow down, stall, cut and
point elsewhere: a slow network (latency on every answer), a silent one (nothing passes, no
connection closes), a failover's moved address (the drill's "virtual IP").

It runs an asyncio loop in a thread of the drill or test process, on a free port of
127.0.0.1; every control method may be called from any thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from concurrent.futures import Future
from typing import Any

CHUNK = 65536


class TcpProxy:
    """Forwards ``127.0.0.1:port`` to ``target_host:target_port``."""

    def __init__(self, target_port: int, target_host: str = "127.0.0.1") -> None:
        self.target = (target_host, target_port)
        self.port = 0
        #: Seconds each chunk from the server waits before it is passed on: the latency a
        #: round trip gains.
        self.delay = 0.0
        self._loop = asyncio.new_event_loop()
        self._flowing: asyncio.Event | None = None
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)

    # --- control (any thread) ------------------------------------------------------------------
    def start(self) -> int:
        """Listen on a free port; returns it."""
        self._thread.start()
        self._call(self._listen()).result(10)
        return self.port

    def stop(self) -> None:
        if not self._thread.is_alive():
            return
        self._call(self._close()).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    def stall(self) -> None:
        """Nothing passes either way, and new connections are held, until ``resume``."""
        self._loop.call_soon_threadsafe(self._gate().clear)

    def resume(self) -> None:
        self._loop.call_soon_threadsafe(self._gate().set)

    def retarget(self, port: int, host: str = "127.0.0.1") -> None:
        """New connections go to ``host:port`` (open ones stay where they are: ``cut`` them)."""
        self.target = (host, port)

    def cut(self) -> None:
        """Close every open connection, both ends, as a failed-over address does."""
        self._call(self._cut()).result(10)

    def _call(self, coroutine: Any) -> Future[Any]:
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop)

    # --- the loop ------------------------------------------------------------------------------
    def _gate(self) -> asyncio.Event:
        if self._flowing is None:
            self._flowing = asyncio.Event()
            self._flowing.set()
        return self._flowing

    async def _listen(self) -> None:
        self._gate()
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        self.port = int(self._server.sockets[0].getsockname()[1])

    async def _close(self) -> None:
        if self._server is not None:
            self._server.close()
        await self._cut()
        others = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for task in others:
            task.cancel()
        await asyncio.gather(*others, return_exceptions=True)

    async def _cut(self) -> None:
        for writer in list(self._writers):
            writer.close()
        self._writers.clear()

    async def _accept(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        self._writers.add(client_w)
        try:
            await self._gate().wait()
            server_r, server_w = await asyncio.open_connection(*self.target)
        except (OSError, asyncio.CancelledError):
            client_w.close()
            self._writers.discard(client_w)
            return
        self._writers.add(server_w)
        # Cancelled when the proxy stops: the connection just ends (a cancelled task here
        # would be reported by asyncio's stream callback as an error).
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.gather(
                self._pipe(client_r, server_w, delayed=False),
                self._pipe(server_r, client_w, delayed=True),
            )

    async def _pipe(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, *, delayed: bool
    ) -> None:
        try:
            while chunk := await reader.read(CHUNK):
                if delayed and self.delay:
                    await asyncio.sleep(self.delay)
                await self._gate().wait()
                writer.write(chunk)
                await writer.drain()
        except (OSError, asyncio.IncompleteReadError):
            pass
        finally:
            with contextlib.suppress(OSError, RuntimeError):
                writer.close()
            self._writers.discard(writer)
