"""``agent-ledger-mcp``: an MCP server that fronts any upstream MCP server through the ledger.

    agent-ledger-mcp --ledger http://127.0.0.1:8000 --token-env LEDGER_TOKEN \\
        --server fs -- npx -y @modelcontextprotocol/server-filesystem /srv/files

It starts the upstream command over stdio (``mcp_upstream``) with the proxy's own environment,
less the ledger's token and the HTTP listener's (the upstream needs neither), imports its tools
into the ledger's registry (where they are re-classified), lists them unchanged to its own
client, and sends every ``tools/call`` through a ``LedgerGuard``. An upstream that cannot start,
or ends before it answers ``initialize``, is reported with its exit status and the end of its
stderr, and the proxy exits 1. An MCP client (the MCP Inspector, Claude Desktop, Cursor) adopts
the ledger by putting this command in front of the server's command in its configuration.

Every call goes into one ledger run, named by ``--run-id``, else ``AGENT_LEDGER_RUN_ID`` (an MCP
host may set one per conversation), else ``default_run_id``: the same for the same server, user
and upstream command. The run is the agent's task, not a connection: the proxy starts it, or
resumes it when it exists, and never finishes it (closing a connection or the proxy ends no
task). A run that has ended (finished, or halted with its version combination) is answered as
a tool result carrying the ledger's refusal. The run is the window in which an identical
side-effecting call is one action, so a run id per conversation or task narrows it. With
``--shadow-of`` (and the mirror's ``--run-id`` and ``--combination-id``) the run is a shadow
run mirroring a live one.

``--http HOST:PORT`` serves streamable HTTP instead of stdio (``mcp_http``): every request
needs the listener's own bearer token (``--http-token-env``, without which it does not start)
and a ``Host`` and ``Origin`` of the listener's own or allowed (``--allowed-host``,
``--allowed-origin``).

A client may name its tool call in the request's ``_meta`` under
``io.agentledger/tool-call-id`` (the step id); without one, a tool with side effects is keyed
by its tool and arguments, so a retried call cannot run twice. A client that means an identical
call as a new action names its business object under ``io.agentledger/business-object-id``:
calls under another business id are another action, under the same one the same action.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import logging
import os
import re
import sys
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from mcp import ClientSession
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server
from mcp.types import CallToolRequestParams, CallToolResult, ListToolsResult

from agent_ledger_client.aio import AsyncLedgerClient, AsyncRun
from agent_ledger_client.errors import LedgerRequestError, LedgerUnavailableError
from agent_ledger_client.mcp_guard import LedgerGuard, result_of
from agent_ledger_client.mcp_http import listener_address, serve_http
from agent_ledger_client.mcp_upstream import Upstream, UpstreamFailed
from agent_ledger_client.observations import refused_request
from agent_ledger_client.protocol import DEFAULT_APPROVAL_DEADLINE, CallContext

#: Where a client may put its tool-call id in a request's ``_meta``.
TOOL_CALL_META_KEY = "io.agentledger/tool-call-id"
#: Where a client may name the business object of a call in a request's ``_meta``.
BUSINESS_OBJECT_META_KEY = "io.agentledger/business-object-id"
#: The environment variable that names the run when ``--run-id`` does not.
RUN_ID_VARIABLE = "AGENT_LEDGER_RUN_ID"
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
    parser.add_argument(
        "--run-id",
        default=None,
        help=f"the ledger run (started, or resumed if it exists); else ${RUN_ID_VARIABLE}, "
        "else one derived from the server, the user and the upstream command",
    )
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
    parser.add_argument(
        "--key-fields",
        action="append",
        default=[],
        type=_key_fields_option,
        metavar="TOOL=PATH[,PATH]",
        help="what identifies a tool's business action (repeat per tool), e.g. "
        "create_issue=repo,title: its calls with the same values are one action. Without, "
        "a side-effecting call is one action with every call of the same arguments in the run",
    )
    parser.add_argument("--tool-timeout", type=float, default=30.0, help="seconds per tool call")
    parser.add_argument("--approval-deadline", type=float, default=DEFAULT_APPROVAL_DEADLINE)
    parser.add_argument(
        "--no-wait-for-approval",
        action="store_true",
        help="answer APPROVAL_REQUIRED at once instead of waiting for a human",
    )
    parser.add_argument("--http", default=None, metavar="HOST:PORT", help="serve streamable HTTP")
    parser.add_argument(
        "--http-token-env",
        default=None,
        metavar="VAR",
        help="the environment variable that holds the HTTP listener's bearer token (required "
        "with --http; never the ledger token)",
    )
    parser.add_argument(
        "--allowed-host",
        action="append",
        default=[],
        metavar="HOST",
        help="a Host header the HTTP listener also serves (as clients send it: name[:port])",
    )
    parser.add_argument(
        "--allowed-origin",
        action="append",
        default=[],
        metavar="ORIGIN",
        help="an Origin the HTTP listener also serves (scheme://host[:port])",
    )
    parser.add_argument("upstream", nargs=argparse.REMAINDER, help="-- the upstream command")
    args = parser.parse_args(argv)
    if args.upstream[:1] == ["--"]:
        args.upstream = args.upstream[1:]
    if not args.upstream:
        parser.error("give the upstream server's command after --")
    if not os.environ.get(args.token_env):
        parser.error(f"the environment variable {args.token_env} holds no ledger token")
    if args.http is not None:
        _check_listener(parser, args)
    return args


def _key_fields_option(text: str) -> tuple[str, list[str]]:
    """``TOOL=path[,path]`` as (tool, paths)."""
    tool, _, paths = text.partition("=")
    fields = [path.strip() for path in paths.split(",") if path.strip()]
    if not tool.strip() or not fields:
        raise argparse.ArgumentTypeError(f"{text!r} is not TOOL=PATH[,PATH]")
    return tool.strip(), fields


def _check_listener(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """The HTTP listener starts only on a valid address and with a token of its own."""
    try:
        listener_address(args.http)
    except ValueError as exc:
        parser.error(f"--http: {exc}")
    if not (args.http_token_env and os.environ.get(args.http_token_env)):
        parser.error(
            "the HTTP listener needs a bearer token of its own, on any address: put it in an "
            "environment variable and name it with --http-token-env"
        )
    if os.environ[args.http_token_env] == os.environ[args.token_env]:
        parser.error("the HTTP listener's token must not be the ledger token")


def default_run_id(
    *, server: str, user_id: str, upstream: Sequence[str], shadow_of: str | None = None
) -> str:
    """The run of a proxy given no run id: the same for the same server, user and upstream
    command (and live run mirrored), so a restarted proxy resumes it. It reads as
    ``mcp.<server>.<user>.<12 hex>``; the digest tells configurations apart."""
    configuration = json.dumps([server, user_id, list(upstream), shadow_of])
    digest = hashlib.sha256(configuration.encode()).hexdigest()[:12]
    return f"mcp.{_run_id_part(server)}.{_run_id_part(user_id)}.{digest}"


def _run_id_part(text: str) -> str:
    """Text as part of a run id, which holds no ``:`` or control character (the ledger
    refuses them), kept short enough for the whole to fit the ledger's 200 characters."""
    return re.sub(r"[\x00-\x1f\x7f:]", "_", text)[:60]


def run_id_of(args: argparse.Namespace, environment: Mapping[str, str]) -> str:
    """``--run-id``, else ``AGENT_LEDGER_RUN_ID``, else ``default_run_id``."""
    return (
        args.run_id
        or environment.get(RUN_ID_VARIABLE)
        or default_run_id(
            server=args.server,
            user_id=args.user_id,
            upstream=args.upstream,
            shadow_of=args.shadow_of,
        )
    )


def upstream_environment(
    args: argparse.Namespace, environment: Mapping[str, str]
) -> dict[str, str]:
    """The proxy's environment for the upstream server, less the proxy's own secrets."""
    secrets = {args.token_env, args.http_token_env}
    return {name: value for name, value in environment.items() if name not in secrets}


class ProxyRun(AsyncRun):
    """The proxy's run, started (or resumed) by ``open``. While the ledger refuses to start it
    (its version combination halted) each call tries again first, so the refusal reaches the
    model as the call's answer and a restored combination needs no restart."""

    def __init__(self, client: AsyncLedgerClient, **start: Any) -> None:
        super().__init__(client, {"run_id": start["run_id"]})
        self.start = start
        self.opened = False

    async def open(self) -> None:
        self.data = (await self.client.start_run(**self.start)).data
        self.opened = True

    async def call(
        self,
        tool: str,
        tool_input: dict[str, Any],
        *,
        execute: Callable[[CallContext], Awaitable[Any] | Any],
        **options: Any,
    ) -> dict[str, Any]:
        if not self.opened:
            await self.open()
        return await super().call(tool, tool_input, execute=execute, **options)


def proxy_server(guard: LedgerGuard, listed: ListToolsResult) -> Server[Any]:
    """The MCP server the proxy's client talks to."""

    async def list_tools(ctx: Any, params: Any) -> ListToolsResult:
        return listed

    async def call_tool(ctx: Any, params: CallToolRequestParams) -> CallToolResult:
        meta = dict(params.meta or {})
        tool_call_id = meta.get(TOOL_CALL_META_KEY)
        business_object_id = meta.get(BUSINESS_OBJECT_META_KEY)
        traceparent = meta.get("traceparent")
        if business_object_id is not None and not (
            isinstance(business_object_id, str) and business_object_id
        ):
            # Read as "none", it would merge a repeat the client meant as a new action.
            detail = f"the request's _meta {BUSINESS_OBJECT_META_KEY} must be a non-empty string"
            return result_of(refused_request(params.name, detail))
        try:
            return await guard.call_tool(
                params.name,
                dict(params.arguments or {}),
                tool_call_id=tool_call_id if isinstance(tool_call_id, str) else None,
                business_object_id=business_object_id,
                traceparent=traceparent if isinstance(traceparent, str) else None,
            )
        except LedgerRequestError as exc:
            if exc.status != 400:
                raise
            # The ledger refused the request before recording it (a business id too long, a
            # key field missing from the arguments): the client's answer, not a protocol error.
            detail = str(exc.problem.get("detail") or exc.problem.get("code") or exc)
            return result_of(refused_request(params.name, detail))

    return Server("agent-ledger-mcp", on_list_tools=list_tools, on_call_tool=call_tool)


async def serve(args: argparse.Namespace) -> None:
    environment = dict(os.environ)
    upstream = Upstream(args.upstream, upstream_environment(args, environment))
    async with AsyncLedgerClient(
        args.ledger, environment[args.token_env], agent_id=args.agent_id
    ) as ledger:
        run = ProxyRun(
            ledger,
            user_id=args.user_id,
            run_id=run_id_of(args, environment),
            shadow_of=args.shadow_of,
            combination_id=args.combination_id,
        )
        async with upstream.connect() as (read, write), ClientSession(read, write) as session:
            await upstream.initialize(session)
            await _open(run)
            guard = LedgerGuard(
                session,
                ledger,
                run,
                server=args.server,
                trust=args.trust,
                file_root=args.file_root,
                key_fields=dict(args.key_fields),
                wait_for_approval=not args.no_wait_for_approval,
                approval_deadline=args.approval_deadline,
                tool_timeout=args.tool_timeout,
            )
            server = proxy_server(guard, await guard.list_tools())
            log.info("proxying %s as %r in run %s", args.upstream[0], args.server, run.run_id)
            if args.http:
                await serve_http(
                    server,
                    args.http,
                    token=environment[args.http_token_env],
                    allowed_hosts=args.allowed_host,
                    allowed_origins=args.allowed_origin,
                )
                return
            async with stdio_server() as (client_read, client_write):
                await server.run(client_read, client_write, server.create_initialization_options())


async def _open(run: ProxyRun) -> None:
    """Start or resume the run; a run the ledger refuses for a halted combination is told to
    the model call by call, any other refusal stops the proxy."""
    try:
        await run.open()
    except LedgerRequestError as exc:
        if exc.problem.get("code") != "RUN_HALTED":
            raise
        log.warning("the ledger refuses run %s: %s", run.run_id, exc)


#: What stops the proxy while it starts, said in one line instead of a traceback.
START_FAILURES = (UpstreamFailed, LedgerRequestError, LedgerUnavailableError)


def _start_failure(error: BaseException) -> BaseException | None:
    """The start failure in ``error``, which the task groups may have wrapped in groups."""
    if isinstance(error, START_FAILURES):
        return error
    if isinstance(error, BaseExceptionGroup):
        for inner in error.exceptions:
            found = _start_failure(inner)
            if found is not None:
                return found
    return None


def main(argv: Sequence[str] | None = None) -> int:
    """The ``agent-ledger-mcp`` command."""
    logging.basicConfig(stream=sys.stderr, level=logging.INFO, format="%(name)s: %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)  # one line per request is noise
    args = parse_arguments(sys.argv[1:] if argv is None else argv)
    try:
        asyncio.run(serve(args))
    except (*START_FAILURES, BaseExceptionGroup) as error:
        failure = _start_failure(error)
        if failure is None:
            raise
        print(f"agent-ledger-mcp: {failure}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
