"""The shapes in which an MCP client retries a tool call whose answer it never got, each run
against ``agent-ledger-mcp`` as a process of its own in front of a real server.

Every shape arms the shim to drop the server's response to the tool's first call, sends the
call, waits until the server has acted (the shim forwarded the call and the effect is in the
server's real state), undoes the effect by hand (``mcp_effects``), then retries:

- ``same-id-stdio``: the identical JSON-RPC request, same id, written again on the proxy's
  stdin while the first is in flight (raw JSON-RPC: the SDK's client never reuses an id);
- ``same-id-http``: the identical POST, same id, same MCP session, after the client gave up
  on the first POST's response stream (what an HTTP client's or a load balancer's retry does);
- ``new-id``: the official client's ``call_tool`` again, which sends a new JSON-RPC id;
- ``reconnect-http``: a new MCP session (a new transport) to the same HTTP listener, after
  the client abandoned the first session with the call in flight;
- ``restart-stdio``: the client stops the stdio proxy with the call in flight (as a host does
  when it reloads its servers) and starts it again with the same configuration;
- ``kill-restart``: the proxy is killed (SIGKILL) with the call in flight and started again
  with the same configuration;
- ``replan``: the model plans the call again: the same arguments under a new tool-call id
  (``_meta`` ``io.agentledger/tool-call-id``).

Each returns every answer the client was told, as ``Answer``s.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager, suppress
from dataclasses import dataclass
from typing import Any, cast

import anyio
import httpx
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.shared.message import SessionMessage
from mcp.types import CallToolResult, RequestParamsMeta, jsonrpc_message_adapter

from agent_ledger_client.mcp_guard import LEDGER_META_KEY
from agent_ledger_client.mcp_proxy import RUN_ID_VARIABLE, TOOL_CALL_META_KEY
from agent_ledger_client.mcp_upstream import Upstream
from tests.client.mcp_effects import World, WriteTool
from tests.client.test_mcp_proxy import HttpProxy, _http_proxy

#: Long enough for any of these servers to answer; a dropped response costs this much.
TOOL_TIMEOUT = 1.5
#: How long a test waits for the server to act, or for an answer.
PATIENCE = 120.0
PROTOCOL_VERSION = "2025-11-25"


@dataclass(frozen=True)
class Answer:
    """What the MCP client was told: a tool result, or a JSON-RPC error (a protocol error)."""

    protocol_error: dict[str, Any] | None
    is_error: bool
    ledger: dict[str, Any]
    text: str

    @property
    def code(self) -> str | None:
        return self.ledger.get("code")


def answer_of(result: CallToolResult) -> Answer:
    data = result.model_dump(mode="json", by_alias=True, exclude_none=True)
    return answer_of_result(data)


def answer_of_result(data: dict[str, Any]) -> Answer:
    text = " ".join(part.get("text", "") for part in data.get("content", []))
    ledger = (data.get("_meta") or {}).get(LEDGER_META_KEY, {})
    return Answer(None, bool(data.get("isError")), ledger, text)


def answer_of_message(message: dict[str, Any]) -> Answer:
    """A JSON-RPC response as the client reads it."""
    if "error" in message:
        return Answer(message["error"], True, {}, json.dumps(message["error"]))
    return answer_of_result(message["result"])


@dataclass(frozen=True)
class Proxy:
    """How to start ``agent-ledger-mcp`` for one test: always the same configuration, so a
    restarted proxy resumes the same run (its default run id, from that configuration)."""

    live_server: Any
    token: str
    world: World
    server: str
    #: Further options (``--trust trusted``, ``--key-fields ...``).
    extra: tuple[str, ...] = ()

    @property
    def options(self) -> list[str]:
        return [
            *("--server", self.server, "--no-wait-for-approval"),
            *("--tool-timeout", str(TOOL_TIMEOUT), *self.extra),
        ]

    @property
    def upstream(self) -> list[str]:
        return self.world.upstream(self.server)

    def command(self) -> list[str]:
        return [
            *(sys.executable, "-m", "agent_ledger_client.mcp_proxy"),
            *("--ledger", self.live_server.url, "--token-env", "LEDGER_TOKEN", *self.options),
            *("--", *self.world.shim.command(self.upstream)),
        ]

    def environment(self) -> dict[str, str]:
        return {**os.environ, "LEDGER_TOKEN": self.token, RUN_ID_VARIABLE: ""}

    @asynccontextmanager
    async def stdio(self) -> AsyncIterator[ClientSession]:
        """The official client's session with the proxy over stdio."""
        command, *args = self.command()
        parameters = StdioServerParameters(command=command, args=args, env=self.environment())
        async with stdio_client(parameters) as (read, write), ClientSession(read, write) as s:
            await s.initialize()
            yield s

    @asynccontextmanager
    async def process(self) -> AsyncIterator[tuple[Upstream, Any]]:
        """The proxy over stdio with its process in view (to kill it), and its streams."""
        process = Upstream(self.command(), self.environment())
        async with process.connect() as streams:
            yield process, streams

    @contextmanager
    def http(self) -> Iterator[HttpProxy]:
        """The proxy serving streamable HTTP, as its own process."""
        shim = self.world.shim
        with _http_proxy(self.live_server, self.token, shim, self.upstream, *self.options) as one:
            yield one


async def acted(world: World, tool: WriteTool) -> None:
    """Wait until the server has run the tool and its effect is in the real state."""
    deadline = time.monotonic() + PATIENCE
    while not (world.shim.calls(tool.name) and tool.applied(world)):
        assert time.monotonic() < deadline, f"{tool.id} never took effect"
        await asyncio.sleep(0.05)


def undo(world: World, tool: WriteTool) -> None:
    """Put the state back by hand, so that a second execution would show."""
    if tool.undo is not None:
        tool.undo(world)
        assert not tool.applied(world), f"{tool.id} could not be undone"


async def in_flight(world: World, tool: WriteTool, call: Callable[[], Awaitable[Any]]) -> None:
    """Start ``call``, wait until the server acted, then abandon the call (the client never
    hears its answer)."""
    task = asyncio.ensure_future(call())
    try:
        await acted(world, tool)
    finally:
        task.cancel()
        with suppress(asyncio.CancelledError, Exception):
            await task


# --- the shapes --------------------------------------------------------------------------------
async def _twice(
    proxy: Proxy, tool: WriteTool, steps: tuple[str | None, str | None]
) -> list[Answer]:
    """The call, then the same call again in the same session: each a new JSON-RPC id, each
    under its tool-call id in ``steps`` (None: the client names none)."""
    arguments = tool.arguments(proxy.world)

    def meta(step: str | None) -> RequestParamsMeta | None:
        return None if step is None else cast(RequestParamsMeta, {TOOL_CALL_META_KEY: step})

    async with proxy.stdio() as session:
        proxy.world.shim.arm(tool.name, "drop_response")
        first = await session.call_tool(tool.name, arguments, meta=meta(steps[0]))
        await acted(proxy.world, tool)
        undo(proxy.world, tool)
        again = await session.call_tool(tool.name, arguments, meta=meta(steps[1]))
    return [answer_of(first), answer_of(again)]


async def new_id(proxy: Proxy, tool: WriteTool) -> list[Answer]:
    return await _twice(proxy, tool, (None, None))


async def replan(proxy: Proxy, tool: WriteTool) -> list[Answer]:
    return await _twice(proxy, tool, ("tool-call-1", "tool-call-2"))


async def restart_stdio(proxy: Proxy, tool: WriteTool) -> list[Answer]:
    arguments = tool.arguments(proxy.world)
    async with proxy.stdio() as session:
        proxy.world.shim.arm(tool.name, "drop_response")
        await in_flight(proxy.world, tool, lambda: session.call_tool(tool.name, arguments))
    undo(proxy.world, tool)
    async with proxy.stdio() as session:
        again = await session.call_tool(tool.name, arguments)
    return [answer_of(again)]


async def kill_restart(proxy: Proxy, tool: WriteTool) -> list[Answer]:
    arguments = tool.arguments(proxy.world)
    async with proxy.process() as (process, (read, write)), ClientSession(read, write) as s:
        await s.initialize()
        proxy.world.shim.arm(tool.name, "drop_response")
        call = asyncio.ensure_future(s.call_tool(tool.name, arguments))
        await acted(proxy.world, tool)
        assert process.process is not None
        os.kill(process.process.pid, signal.SIGKILL)
        with suppress(Exception):
            await call  # the connection closed: the client never hears this call's answer
    undo(proxy.world, tool)
    async with proxy.stdio() as session:
        again = await session.call_tool(tool.name, arguments)
    return [answer_of(again)]


async def reconnect_http(proxy: Proxy, tool: WriteTool) -> list[Answer]:
    arguments = tool.arguments(proxy.world)
    with proxy.http() as listener:
        async with listener.connect() as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            proxy.world.shim.arm(tool.name, "drop_response")
            await in_flight(proxy.world, tool, lambda: session.call_tool(tool.name, arguments))
        undo(proxy.world, tool)
        async with listener.connect() as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            again = await session.call_tool(tool.name, arguments)
    return [answer_of(again)]


def _initialize(request_id: int) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": request_id,
        "method": "initialize",
        "params": {
            "protocolVersion": PROTOCOL_VERSION,
            "capabilities": {},
            "clientInfo": {"name": "retrying-client", "version": "0"},
        },
    }


INITIALIZED = {"jsonrpc": "2.0", "method": "notifications/initialized"}


def _tool_call(request_id: int, tool: WriteTool, world: World) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": request_id,
        "method": "tools/call",
        "params": {"name": tool.name, "arguments": tool.arguments(world)},
    }


async def same_id_stdio(proxy: Proxy, tool: WriteTool) -> list[Answer]:
    call = _tool_call(7, tool, proxy.world)
    async with proxy.process() as (_process, (read, write)):

        async def send(message: dict[str, Any]) -> None:
            await write.send(SessionMessage(jsonrpc_message_adapter.validate_python(message)))

        async def response(request_id: int) -> dict[str, Any]:
            with anyio.fail_after(PATIENCE):
                async for received in read:
                    assert not isinstance(received, Exception), received
                    message = received.message.model_dump(
                        mode="json", by_alias=True, exclude_none=True
                    )
                    if message.get("id") == request_id and "method" not in message:
                        return cast(dict[str, Any], message)
            raise AssertionError("the proxy closed its stdout")

        await send(_initialize(1))
        await response(1)
        await send(INITIALIZED)
        proxy.world.shim.arm(tool.name, "drop_response")
        await send(call)
        await acted(proxy.world, tool)
        undo(proxy.world, tool)
        await send(call)
        answers = [await response(7), await response(7)]
    return [answer_of_message(message) for message in answers]


async def _posted(
    http: httpx.AsyncClient, url: str, message: dict[str, Any], headers: dict[str, str]
) -> httpx.Response | dict[str, Any]:
    """POST one message; for a request, its JSON-RPC response read off the SSE stream."""
    async with http.stream("POST", url, json=message, headers=headers) as answer:
        if "id" not in message:
            return answer
        async for line in answer.aiter_lines():
            if line.startswith("data:") and line[5:].strip():
                received = json.loads(line[5:])
                if received.get("id") == message["id"] and "method" not in received:
                    received["_headers"] = dict(answer.headers)
                    return cast(dict[str, Any], received)
    raise AssertionError(f"no response to {message['method']}")


async def same_id_http(proxy: Proxy, tool: WriteTool) -> list[Answer]:
    call = _tool_call(7, tool, proxy.world)
    with proxy.http() as listener:
        headers = {
            "Authorization": f"Bearer {listener.token}",
            "Accept": "application/json, text/event-stream",
        }
        timeout = httpx.Timeout(30, read=PATIENCE)
        async with httpx.AsyncClient(headers=headers, timeout=timeout) as http:
            opened = await _posted(http, listener.url, _initialize(1), {})
            assert isinstance(opened, dict) and "result" in opened, opened
            session = {
                "mcp-session-id": opened["_headers"]["mcp-session-id"],
                "mcp-protocol-version": PROTOCOL_VERSION,
            }
            await _posted(http, listener.url, INITIALIZED, session)
            proxy.world.shim.arm(tool.name, "drop_response")
            await in_flight(proxy.world, tool, lambda: _posted(http, listener.url, call, session))
            undo(proxy.world, tool)
            again = await _posted(http, listener.url, call, session)
    assert isinstance(again, dict)
    return [answer_of_message(again)]


Shape = Callable[[Proxy, WriteTool], Awaitable[list[Answer]]]
SHAPES: dict[str, Shape] = {
    "same-id-stdio": same_id_stdio,
    "same-id-http": same_id_http,
    "new-id": new_id,
    "reconnect-http": reconnect_http,
    "restart-stdio": restart_stdio,
    "kill-restart": kill_restart,
    "replan": replan,
}
