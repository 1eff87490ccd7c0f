"""Every write tool of the official servers, after a lost response, runs once: through the
guard and through the proxy (stdio and streamable HTTP), against the filesystem and memory
servers (npx) and the git server (PyPI). The write tools are the ones the server lists without
``readOnlyHint``, so a tool a server adds is covered by default (the test fails until it has
arguments here)."""

from __future__ import annotations

import asyncio
import shutil
import subprocess
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from mcp import ClientSession
from mcp.types import CallToolResult, ListToolsResult

from agent_ledger_client.mcp_guard import LEDGER_META_KEY, LedgerGuard
from tests.client.test_mcp_guard_servers import FILESYSTEM, Shim, _run, memory_server
from tests.client.test_mcp_proxy import GIT, HttpProxy, _http_proxy, _proxied

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("npx") is None, reason="the official servers need Node (npx)"),
]
#: Long enough for any of these servers to answer; a dropped response costs this much.
TOOL_TIMEOUT = 1.5
Arguments = dict[str, dict[str, Any]]
Call = Callable[[str, dict[str, Any]], Awaitable[CallToolResult]]


def _git(repo: Path, *args: str) -> str:
    done = subprocess.run(
        ["git", "-C", str(repo), *args], check=True, capture_output=True, text=True
    )
    return done.stdout


def filesystem(folder: Path) -> tuple[list[str], Arguments]:
    """The filesystem server on a root holding two files, and a call of each write tool, in
    an order in which each succeeds."""
    root = folder / "files"
    root.mkdir()
    (root / "notes.txt").write_text("old\n")
    (root / "draft.txt").write_text("move me\n")
    return [*FILESYSTEM, str(root)], {
        "write_file": {"path": str(root / "new.txt"), "content": "new\n"},
        "edit_file": {
            "path": str(root / "notes.txt"),
            "edits": [{"oldText": "old", "newText": "edited"}],
        },
        "create_directory": {"path": str(root / "made")},
        "move_file": {"source": str(root / "draft.txt"), "destination": str(root / "moved.txt")},
    }


def memory(folder: Path) -> tuple[list[str], Arguments]:
    ada = {"from": "Ada", "to": "Ada", "relationType": "knows"}
    return memory_server(folder), {
        "create_entities": {
            "entities": [{"name": "Ada", "entityType": "person", "observations": ["x"]}]
        },
        "create_relations": {"relations": [ada]},
        "add_observations": {"observations": [{"entityName": "Ada", "contents": ["likes tea"]}]},
        "delete_observations": {"deletions": [{"entityName": "Ada", "observations": ["x"]}]},
        "delete_relations": {"relations": [ada]},
        "delete_entities": {"entityNames": ["Ada"]},
    }


def git(folder: Path) -> tuple[list[str], Arguments]:
    """The git server on a repository with one commit and a new, untracked file."""
    repo = folder / "repo"
    repo.mkdir()
    _git(repo, "init", "-q", "-b", "main")
    _git(repo, "config", "user.email", "a@example.com")
    _git(repo, "config", "user.name", "Agent")
    (repo / "README.md").write_text("hello\n")
    _git(repo, "add", "README.md")
    _git(repo, "commit", "-q", "-m", "first")
    (repo / "added.txt").write_text("added\n")
    at = {"repo_path": str(repo)}
    return [*GIT, "--repository", str(repo)], {
        "git_add": {**at, "files": ["added.txt"]},
        "git_commit": {**at, "message": "agent commit"},
        "git_create_branch": {**at, "branch_name": "feature"},
        "git_checkout": {**at, "branch_name": "feature"},
        "git_reset": at,
    }


SERVERS = {"fs": filesystem, "memory": memory, "git": git}
Scenario = Callable[
    [Callable[[], Awaitable[ListToolsResult]], Call],
    Awaitable[tuple[list[str], dict[str, list[CallToolResult]]]],
]


def _lost_writes(shim: Shim, arguments: Arguments) -> Scenario:
    """Each listed write tool, its response dropped once, then called again: the write tools
    listed and each one's two results."""

    async def scenario(
        list_tools: Callable[[], Awaitable[ListToolsResult]], call: Call
    ) -> tuple[list[str], dict[str, list[CallToolResult]]]:
        listed = await list_tools()
        writes = [
            tool.name
            for tool in listed.tools
            if not (tool.annotations and tool.annotations.read_only_hint)
        ]
        seen: dict[str, list[CallToolResult]] = {}
        for name, tool_input in arguments.items():
            if name in writes:
                shim.arm(name, "drop_response")
                seen[name] = [await call(name, tool_input) for _attempt in range(2)]
        return writes, seen

    return scenario


def _through(
    path: str,
    live_server: Any,
    token: str,
    shim: Shim,
    upstream: list[str],
    server: str,
    scenario: Scenario,
) -> tuple[list[str], dict[str, list[CallToolResult]]]:
    """The scenario through the proxy (an MCP client session over stdio or streamable HTTP)
    or the guard; none waits for a human, and a retried call is the same call (the guard: the
    same tool-call id)."""
    options = ["--server", server, "--no-wait-for-approval", "--tool-timeout", str(TOOL_TIMEOUT)]

    async def via_proxy(session: ClientSession) -> Any:
        return await scenario(session.list_tools, session.call_tool)

    if path == "proxy":
        return _proxied(live_server, token, shim, upstream, via_proxy, *options)
    if path == "proxy-http":

        async def over_http(proxy: HttpProxy) -> Any:
            async with proxy.connect() as (read, write), ClientSession(read, write) as session:
                await session.initialize()
                return await via_proxy(session)

        with _http_proxy(live_server, token, shim, upstream, *options) as proxy:
            return asyncio.run(over_http(proxy))

    async def via_guard(guard: LedgerGuard, shim: Shim) -> Any:
        async def call(name: str, tool_input: dict[str, Any]) -> CallToolResult:
            return await guard.call_tool(name, tool_input, tool_call_id=f"tc-{name}")

        return await scenario(guard.session.list_tools, call)

    return _run(
        live_server,
        token,
        shim,
        upstream,
        via_guard,
        server=server,
        wait_for_approval=False,
        tool_timeout=TOOL_TIMEOUT,
    )


def _code(result: CallToolResult) -> str | None:
    return result.meta[LEDGER_META_KEY]["code"] if result.meta else None


PATHS = ("guard", "proxy", "proxy-http")
#: `make test` takes each server through one path and each path with one server; `make drill`
#: (marker `scale`) runs the other six pairs.
EACH_ONCE = {("fs", "guard"), ("git", "proxy"), ("memory", "proxy-http")}


@pytest.mark.parametrize(
    ("server", "path"),
    [
        pytest.param(server, path, marks=() if (server, path) in EACH_ONCE else pytest.mark.scale)
        for server in sorted(SERVERS)
        for path in PATHS
    ],
)
def test_no_write_tool_runs_again_after_its_response_is_lost(
    server: str, path: str, live_server, ledger_token: str, tmp_path: Path
) -> None:
    shim = Shim(tmp_path)
    upstream, arguments = SERVERS[server](tmp_path)
    writes, seen = _through(
        path, live_server, ledger_token, shim, upstream, server, _lost_writes(shim, arguments)
    )
    assert set(writes) - set(arguments) == set(), "write tools with no arguments in this test"
    assert sorted(seen) == sorted(writes)
    for name, results in seen.items():
        codes = [_code(result) for result in results]
        assert all(result.is_error for result in results), (name, codes)
        assert codes[0] == "SIDE_EFFECT_UNCERTAIN", (name, codes)
        assert codes[1] in {"SIDE_EFFECT_UNCERTAIN", "APPROVAL_REQUIRED"}, (name, codes)
        assert len(shim.calls(name)) == 1, f"{name} ran again after its response was lost"
    if server == "git":
        repo = Path(arguments["git_add"]["repo_path"])
        assert _git(repo, "log", "--oneline").count("agent commit") == 1
        assert _git(repo, "branch", "--show-current").strip() == "feature"
