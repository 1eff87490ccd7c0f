"""``agent-ledger-mcp``: an MCP server that fronts any upstream MCP server through the ledger.

    agent-ledger-mcp --ledger http://127.0.0.1:8000 --token-env LEDGER_TOKEN \\
        --server fs -- npx -y @modelcontextprotocol/server-filesystem /srv/files

It starts the upstream command over stdio, imports its tools into the ledger's registry (where
they are re-classified), lists them unchanged to its own client, and sends every
``tools/call`` through a ``LedgerGuard``. One proxy session is one ledger run; with
``--shadow-of`` (and the mirror's ``--run-id`` and ``--combination-id``) a shadow run mirroring
a live one. An MCP client (the MCP Inspector, Claude Desktop, Cursor) adopts the ledger by
putting this command in front of the server's command in its configuration.
``--http HOST:PORT`` serves streamable HTTP instead of stdio.

A client may name its tool call in the request's ``_meta`` under
``io.agentledger/tool-call-id`` (the step id); without one, a tool with side effects is keyed
by its tool and arguments, so a retried call cannot run twice.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
from collections.abc import Sequence
from typing import Any

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server
from mcp.types import CallToolRequestParams, CallToolResult, ListToolsResult

from agent_ledger_client.aio import AsyncLedgerClient
from agent_ledger_client.mcp_guard import LedgerGuard
from agent_ledger_client.protocol import DEFAULT_APPROVAL_DEADLINE

#: Where a client may put its tool-call id in a request's ``_meta``.
TOOL_CALL_META_KEY = "io.agentledger/tool-call-id"
log = logging.getLogger("agent_ledger_client.mcp_proxy")


def parse_arguments(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="agent-ledger-mcp",
        description="An MCP server that sends every tool call of an upstream server through "
        "Agent Ledger.",
    )
    parser.add_argument("--ledger", required=True, help="the ledger's base URL")
    parser.add_argument(
        "--token-env",
        required=True,
        metavar="VAR",
        help="the environment variable that holds the ledger token (never a command argument)",
    )
    parser.add_argument("--server", default="mcp", help="the upstream's name in the registry")
    parser.add_argument("--trust", choices=["untrusted", "trusted"], default="untrusted")
    parser.add_argument("--user-id", default="mcp-user", help="the end user the run is for")
    parser.add_argument("--run-id", default=None, help="resume this ledger run")
    parser.add_argument(
        "--shadow-of",
        default=None,
        metavar="RUN_ID",
        help="make the run a shadow run mirroring this live run: its reads run, its "
        "side-effecting tools are never called (SHADOW_DRY_RUN)",
    )
    parser.add_argument(
        "--combination-id", type=int, default=None, help="pin the run to this combination"
    )
    parser.add_argument("--agent-id", default="agent-ledger-mcp")
    parser.add_argument(
        "--file-root", default=None, help="settle lost write_file calls by hash under this root"
    )
    parser.add_argument("--tool-timeout", type=float, default=30.0, help="seconds per tool call")
    parser.add_argument("--approval-deadline", type=float, default=DEFAULT_APPROVAL_DEADLINE)
    parser.add_argument(
        "--no-wait-for-approval",
        action="store_true",
        help="answer APPROVAL_REQUIRED at once instead of waiting for a human",
    )
    parser.add_argument("--http", default=None, metavar="HOST:PORT", help="serve streamable HTTP")
    parser.add_argument("upstream", nargs=argparse.REMAINDER, help="-- the upstream command")
    args = parser.parse_args(argv)
    if args.upstream[:1] == ["--"]:
        args.upstream = args.upstream[1:]
    if not args.upstream:
        parser.error("give the upstream server's command after --")
    if not os.environ.get(args.token_env):
        parser.error(f"the environment variable {args.token_env} holds no ledger token")
    return args


def proxy_server(guard: LedgerGuard, listed: ListToolsResult) -> Server[Any]:
    """The MCP server the proxy's client talks to."""

    async def list_tools(ctx: Any, params: Any) -> ListToolsResult:
        return listed

    async def call_tool(ctx: Any, params: CallToolRequestParams) -> CallToolResult:
        meta = dict(params.meta or {})
        tool_call_id = meta.get(TOOL_CALL_META_KEY)
        traceparent = meta.get("traceparent")
        return await guard.call_tool(
            params.name,
            dict(params.arguments or {}),
            tool_call_id=tool_call_id if isinstance(tool_call_id, str) else None,
            traceparent=traceparent if isinstance(traceparent, str) else None,
        )

    return Server("agent-ledger-mcp", on_list_tools=list_tools, on_call_tool=call_tool)


async def serve(args: argparse.Namespace) -> None:
    upstream = StdioServerParameters(command=args.upstream[0], args=args.upstream[1:])
    async with (
        stdio_client(upstream) as (read, write),
        ClientSession(read, write) as session,
        AsyncLedgerClient(
            args.ledger, os.environ[args.token_env], agent_id=args.agent_id
        ) as ledger,
        ledger.run(
            user_id=args.user_id,
            run_id=args.run_id,
            shadow_of=args.shadow_of,
            combination_id=args.combination_id,
        ) as run,
    ):
        await session.initialize()
        guard = LedgerGuard(
            session,
            ledger,
            run,
            server=args.server,
            trust=args.trust,
            file_root=args.file_root,
            wait_for_approval=not args.no_wait_for_approval,
            approval_deadline=args.approval_deadline,
            tool_timeout=args.tool_timeout,
        )
        server = proxy_server(guard, await guard.list_tools())
        log.info("proxying %s as %r in run %s", args.upstream[0], args.server, run.run_id)
        if args.http:
            await _serve_http(server, args.http)
            return
        async with stdio_server() as (client_read, client_write):
            await server.run(client_read, client_write, server.create_initialization_options())


async def _serve_http(server: Server[Any], address: str) -> None:
    import uvicorn  # a dependency of the MCP SDK's HTTP transport

    host, _, port = address.rpartition(":")
    config = uvicorn.Config(
        server.streamable_http_app(host=host or "127.0.0.1"),
        host=host or "127.0.0.1",
        port=int(port),
        log_level="warning",
    )
    await uvicorn.Server(config).serve()


def main(argv: Sequence[str] | None = None) -> int:
    """The ``agent-ledger-mcp`` command."""
    logging.basicConfig(stream=sys.stderr, level=logging.INFO, format="%(name)s: %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)  # one line per request is noise
    args = parse_arguments(sys.argv[1:] if argv is None else argv)
    asyncio.run(serve(args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
