"""The server behind ``agent-ledger-mcp``: its command, started over stdio the way the MCP
SDK's ``stdio_client`` starts a server, with the process kept in view.

    upstream = Upstream(["npx", "-y", "@modelcontextprotocol/server-memory"], environment)
    async with upstream.connect() as (read, write), ClientSession(read, write) as session:
        await upstream.initialize(session)   # UpstreamFailed: how it ended, its stderr's tail

The SDK's transport keeps its process to itself, so a server that exits while starting is seen
only as "Connection closed"; here the proxy can say how it ended. Otherwise it is the SDK's
shape: newline-delimited JSON-RPC on stdin and stdout, a process group of its own, stdin closed
on shutdown and the group terminated if the server outlives a grace period. The server's stderr
goes on to the proxy's stderr (where an MCP host logs it) and its last lines are kept.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager, suppress

import anyio
import anyio.abc
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from mcp import ClientSession
from mcp.shared.message import SessionMessage
from mcp.types import jsonrpc_message_adapter

#: How much of the server's stderr a failure report quotes.
STDERR_TAIL = 4000
#: Seconds a server has to exit on its own (stdin closed), then after each signal.
GRACE = 2.0

Streams = tuple[
    MemoryObjectReceiveStream[SessionMessage | Exception],
    MemoryObjectSendStream[SessionMessage],
]


class UpstreamFailed(Exception):
    """The upstream server could not be started, or ended before it answered ``initialize``."""


class Upstream:
    """One upstream server process, started by ``connect``."""

    def __init__(self, command: Sequence[str], environment: Mapping[str, str]) -> None:
        self.command = list(command)
        self.environment = dict(environment)
        self.process: anyio.abc.Process | None = None
        self._stderr_tail = b""
        self._stderr_closed = anyio.Event()

    @asynccontextmanager
    async def connect(self) -> AsyncIterator[Streams]:
        """Start the server; the streams a ``ClientSession`` talks to it through. Raises
        ``UpstreamFailed`` when the command cannot be started at all."""
        try:
            process = await anyio.open_process(
                self.command,
                env=self.environment,
                stderr=subprocess.PIPE,
                start_new_session=True,  # its own group: stopping it stops its children
            )
        except OSError as exc:
            raise UpstreamFailed(f"could not start {self.command[0]}: {exc}") from exc
        self.process = process
        to_session, from_server = anyio.create_memory_object_stream[SessionMessage | Exception](0)
        to_server, from_session = anyio.create_memory_object_stream[SessionMessage](0)
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(self._read_stdout, process, to_session)
            tasks.start_soon(self._write_stdin, process, from_session, to_session)
            tasks.start_soon(self._relay_stderr, process)
            try:
                yield from_server, to_server
            finally:
                with anyio.CancelScope(shield=True):
                    await self._stop(process)
                    for stream in (from_server, to_server, to_session, from_session):
                        await stream.aclose()
                tasks.cancel_scope.cancel()

    async def initialize(self, session: ClientSession) -> None:
        """The MCP handshake; a server that ends before it answers raises ``UpstreamFailed``
        saying how it ended and what it last wrote to stderr."""
        try:
            await session.initialize()
        except Exception as exc:
            if await self._exit_status() is None:
                raise  # still running: a protocol error of a live server, as it is
            raise UpstreamFailed(await self.failure()) from exc

    async def failure(self) -> str:
        """How the server ended, with the end of its stderr."""
        status = await self._exit_status()
        with anyio.move_on_after(GRACE):
            await self._stderr_closed.wait()
        if status is None:
            ended = "stopped answering"
        elif status < 0:
            ended = f"was killed by signal {signal.Signals(-status).name}"
        else:
            ended = f"exited with status {status}"
        tail = self._stderr_tail.decode(errors="replace").strip()
        said = f"; the end of its stderr:\n{tail}" if tail else "; it wrote nothing to stderr"
        return f"the upstream server ({' '.join(self.command)}) {ended}{said}"

    async def _exit_status(self) -> int | None:
        """The server's exit status, waiting up to the grace period for it to end."""
        assert self.process is not None
        with anyio.move_on_after(GRACE):
            while self.process.returncode is None:
                await anyio.sleep(0.01)
        return self.process.returncode

    @staticmethod
    async def _read_stdout(
        process: anyio.abc.Process, to_session: MemoryObjectSendStream[SessionMessage | Exception]
    ) -> None:
        assert process.stdout is not None
        pending = b""
        with suppress(anyio.ClosedResourceError, anyio.BrokenResourceError):
            async with to_session:
                async for chunk in process.stdout:
                    *lines, pending = (pending + chunk).split(b"\n")
                    for line in lines:
                        if line.strip():
                            await to_session.send(_message(line))

    @staticmethod
    async def _write_stdin(
        process: anyio.abc.Process,
        from_session: MemoryObjectReceiveStream[SessionMessage],
        to_session: MemoryObjectSendStream[SessionMessage | Exception],
    ) -> None:
        assert process.stdin is not None
        try:
            async with from_session:
                async for message in from_session:
                    line = message.message.model_dump_json(by_alias=True, exclude_unset=True)
                    await process.stdin.send(line.encode() + b"\n")
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
            # A server that stopped reading: the session sees the connection end.
            await to_session.aclose()

    async def _relay_stderr(self, process: anyio.abc.Process) -> None:
        assert process.stderr is not None
        try:
            async for chunk in process.stderr:
                sys.stderr.buffer.write(chunk)
                sys.stderr.buffer.flush()
                self._stderr_tail = (self._stderr_tail + chunk)[-STDERR_TAIL:]
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
            pass
        finally:
            self._stderr_closed.set()

    async def _stop(self, process: anyio.abc.Process) -> None:
        """Close stdin and let the server exit; else terminate its group, then kill it."""
        assert process.stdin is not None
        with suppress(anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
            await process.stdin.aclose()
        for hard in (False, True):
            if await self._exit_status() is not None:
                break
            _stop_group(process, hard=hard)
        with anyio.move_on_after(GRACE):
            await process.aclose()


def _message(line: bytes) -> SessionMessage | Exception:
    """One line of the server's stdout; a line that is not JSON-RPC goes to the session as
    the error it is, as the SDK's own transport hands it on."""
    try:
        return SessionMessage(jsonrpc_message_adapter.validate_json(line, by_name=False))
    except ValueError as exc:
        return exc


def _stop_group(process: anyio.abc.Process, *, hard: bool) -> None:
    """Terminate (or kill) the server and the processes it started (npx starts node)."""
    if sys.platform == "win32":  # no process groups: the server alone
        process.kill() if hard else process.terminate()
        return
    with suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL if hard else signal.SIGTERM)
