"""The MCP guard against a real MCP server (mcp-server-git) started over stdio."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

from agent_ledger_client import AsyncLedgerClient
from agent_ledger_client.mcp_guard import LedgerGuard
from ledger.models import IdempotencyRecord, Tool

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


class Flaky:
    """Wraps a real ClientSession: the next call fails as the network would."""

    def __init__(self, session: ClientSession) -> None:
        self.session = session
        self.fail_next: str | None = None  # "before" or "after" the server got the call
        self.calls = 0

    async def list_tools(self) -> Any:
        return await self.session.list_tools()

    async def call_tool(
        self, name: str, arguments: dict[str, Any] | None = None, **options: Any
    ) -> Any:
        self.calls += 1
        mode, self.fail_next = self.fail_next, None
        if mode == "before":
            raise ConnectionResetError("connection to the MCP server was lost")
        result = await self.session.call_tool(name, arguments, **options)
        if mode == "after":
            raise TimeoutError("the MCP server did not answer in time")
        return result


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(repo), *args], check=True, capture_output=True, text=True
    ).stdout


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    path = tmp_path / "repo"
    path.mkdir()
    _git(path, "init", "-q")
    _git(path, "config", "user.email", "agent@example.com")
    _git(path, "config", "user.name", "Agent")
    (path / "README.md").write_text("hello\n")
    _git(path, "add", "README.md")
    return path


def test_git_status_replays_and_git_commit_never_does(
    live_server,
    ledger_token: str,
    repo: Path,
) -> None:
    async def scenario() -> dict[str, Any]:
        params = StdioServerParameters(
            command=sys.executable, args=["-m", "mcp_server_git", "--repository", str(repo)]
        )
        async with (
            stdio_client(params) as (read, write),
            ClientSession(read, write) as session,
            AsyncLedgerClient(live_server.url, ledger_token) as ledger,
        ):
            await session.initialize()
            flaky = Flaky(session)
            run = await ledger.start_run(user_id="u1")
            guard = LedgerGuard(flaky, ledger, run, server="git")  # type: ignore[arg-type]
            listed = await guard.list_tools()

            flaky.fail_next = "before"
            status = await guard.call_tool(
                "git_status", {"repo_path": str(repo)}, tool_call_id="call-status"
            )
            status_calls = flaky.calls

            flaky.fail_next = "after"
            commit_args = {"repo_path": str(repo), "message": "agent commit"}
            first = await guard.call_tool("git_commit", commit_args, tool_call_id="call-commit")
            again = await guard.call_tool("git_commit", commit_args, tool_call_id="call-commit")
            await run.finish("completed")
            return {
                "listed": len(listed.tools),
                "status": status,
                "status_calls": status_calls,
                "first": first,
                "again": again,
                "calls": flaky.calls,
            }

    out = asyncio.run(scenario())
    assert out["listed"] >= 10
    assert Tool.objects.get(name="git/git_status").replay_policy == "auto"
    assert Tool.objects.get(name="git/git_commit").replay_policy == "never"

    assert out["status"].is_error is not True
    assert out["status_calls"] == 2  # the lost call was replayed automatically

    for result in (out["first"], out["again"]):
        assert result.is_error is True
        observation = json.loads(result.content[0].text)
        assert observation["code"] == "SIDE_EFFECT_UNCERTAIN"
    assert out["calls"] == 3  # status twice, commit once: never replayed
    assert _git(repo, "log", "--oneline").count("agent commit") == 1
    record = IdempotencyRecord.objects.get(tool__name="git/git_commit")
    assert (record.state, record.executions) == ("unknown", 1)
