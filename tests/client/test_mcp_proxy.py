"""``agent-ledger-mcp`` as an MCP client sees it: a real MCP client session talks to the proxy
over stdio, the proxy to real servers from the registries (the filesystem and memory servers
through npx, the git server from PyPI) through the fault-injecting shim."""

from __future__ import annotations

import asyncio
import os
import secrets
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx2
import pytest
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client

from agent_ledger_client.mcp_guard import LEDGER_META_KEY
from ledger.models import IdempotencyRecord, PolicyRule, Run, Tenant
from ledger.services.runs import start_run
from tests.client.shadowing import candidate_in_shadow
from tests.client.test_mcp_guard_servers import FILESYSTEM, Shim

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("npx") is None, reason="the official servers need Node (npx)"),
]
GIT = [sys.executable, "-m", "mcp_server_git"]


def _proxy_arguments(live_server: Any, shim: Shim, upstream: list[str], *options: str) -> list[str]:
    """The proxy's command line after the interpreter, with the shim in front of upstream."""
    return [
        "-m",
        "agent_ledger_client.mcp_proxy",
        "--ledger",
        live_server.url,
        "--token-env",
        "LEDGER_TOKEN",
        "--tool-timeout",
        "3",
        *options,
        "--",
        *shim.command(upstream),
    ]


def _proxied(
    live_server: Any,
    token: str,
    shim: Shim,
    upstream: list[str],
    scenario: Callable[[ClientSession], Awaitable[Any]],
    *options: str,
    environment: Mapping[str, str] | None = None,
) -> Any:
    """The scenario in an MCP client session with the proxy over stdio, the proxy started
    with this process's environment, the ledger token and ``environment``."""
    command = _proxy_arguments(live_server, shim, upstream, *options)
    params = StdioServerParameters(
        command=sys.executable,
        args=command,
        env={**os.environ, "LEDGER_TOKEN": token, **(environment or {})},
    )

    async def main() -> Any:
        async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            return await scenario(session)

    return asyncio.run(main())


@pytest.fixture
def shim(tmp_path: Path) -> Shim:
    return Shim(tmp_path)


def _code(result: Any) -> str:
    return result.meta[LEDGER_META_KEY]["code"] or ("OK" if not result.is_error else "")


def test_a_read_through_the_proxy_runs_once_and_returns_its_structured_result(
    live_server, ledger_token: str, shim: Shim, tmp_path: Path
) -> None:
    (tmp_path / "a.txt").write_text("hello\n")

    async def scenario(session: ClientSession) -> Any:
        listed = await session.list_tools()
        read = await session.call_tool("read_text_file", {"path": str(tmp_path / "a.txt")})
        return listed, read

    listed, read = _proxied(
        live_server, ledger_token, shim, [*FILESYSTEM, str(tmp_path)], scenario, "--server", "fs"
    )
    assert "write_file" in {tool.name for tool in listed.tools}
    assert read.is_error is not True and read.structured_content == {"content": "hello\n"}
    assert read.meta[LEDGER_META_KEY]["ok"] is True
    assert len(shim.calls("read_text_file")) == 1
    assert IdempotencyRecord.objects.get().executions == 1


def test_a_lost_git_commit_is_never_executed_again(
    live_server, ledger_token: str, shim: Shim, tmp_path: Path
) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    for args in (
        ["init", "-q"],
        ["config", "user.email", "a@example.com"],
        ["config", "user.name", "Agent"],
    ):
        subprocess.run(["git", "-C", str(repo), *args], check=True)
    (repo / "README.md").write_text("hello\n")
    subprocess.run(["git", "-C", str(repo), "add", "README.md"], check=True)
    commit = {"repo_path": str(repo), "message": "agent commit"}

    async def scenario(session: ClientSession) -> list[Any]:
        status = await session.call_tool("git_status", {"repo_path": str(repo)})
        shim.arm("git_commit", "drop_response")
        first = await session.call_tool("git_commit", commit)
        again = await session.call_tool("git_commit", commit)
        return [status, first, again]

    status, first, again = _proxied(
        live_server,
        ledger_token,
        shim,
        [*GIT, "--repository", str(repo)],
        scenario,
        "--server",
        "git",
    )
    assert status.is_error is not True and len(shim.calls("git_status")) == 1
    assert _code(first) == _code(again) == "SIDE_EFFECT_UNCERTAIN"
    log = subprocess.run(
        ["git", "-C", str(repo), "log", "--oneline"], capture_output=True, text=True, check=True
    ).stdout
    assert log.count("agent commit") == 1 and len(shim.calls("git_commit")) == 1


def test_a_lost_write_file_that_landed_settles_already_applied_through_the_proxy(
    live_server, ledger_token: str, shim: Shim, tmp_path: Path
) -> None:
    root = tmp_path / "files"
    root.mkdir()
    (root / "app.py").write_text("old\n")
    PolicyRule.objects.create(
        tenant=Tenant.objects.get(),
        pattern="fs/write_file",
        idempotency="conditional",
        reason="file writes are settled by the file's hash",
    )

    async def scenario(session: ClientSession) -> Any:
        shim.arm("write_file", "drop_response")
        return await session.call_tool(
            "write_file", {"path": str(root / "app.py"), "content": "new\n"}
        )

    result = _proxied(
        live_server,
        ledger_token,
        shim,
        [*FILESYSTEM, str(root)],
        scenario,
        "--server",
        "fs",
        "--file-root",
        str(root),
    )
    assert _code(result) == "ALREADY_APPLIED", result
    assert (root / "app.py").read_text() == "new\n" and len(shim.calls("write_file")) == 1
    assert IdempotencyRecord.objects.get(tool__name="fs/write_file").state == "succeeded"


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@dataclass(frozen=True)
class HttpProxy:
    """A proxy serving streamable HTTP: its MCP endpoint and its listener's bearer token."""

    url: str
    token: str

    @asynccontextmanager
    async def connect(self) -> AsyncIterator[Any]:
        """The official MCP client's streamable-HTTP transport, carrying the token."""
        headers = {"Authorization": f"Bearer {self.token}"}
        async with (
            httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30, read=300)) as http,
            streamable_http_client(self.url, http_client=http) as streams,
        ):
            yield streams


@contextmanager
def _http_proxy(
    live_server: Any,
    token: str,
    shim: Shim,
    upstream: list[str],
    *options: str,
    bind: str = "127.0.0.1",
) -> Iterator[HttpProxy]:
    """The proxy serving streamable HTTP on a free port of ``bind`` (reached at 127.0.0.1 when
    it binds every address), as its own process, its listener's token in ``PROXY_TOKEN``."""
    port = _free_port()
    listener = secrets.token_urlsafe(32)
    reached = "127.0.0.1" if bind == "0.0.0.0" else bind  # noqa: S104 - the address under test
    command = _proxy_arguments(
        live_server,
        shim,
        upstream,
        "--http",
        f"{bind}:{port}",
        "--http-token-env",
        "PROXY_TOKEN",
        *options,
    )
    log = shim.log.with_name("proxy.log")
    with log.open("wb") as stderr:
        proxy = subprocess.Popen(
            [sys.executable, *command],
            env={**os.environ, "LEDGER_TOKEN": token, "PROXY_TOKEN": listener},
            stdout=subprocess.DEVNULL,
            stderr=stderr,
        )
    try:
        deadline = time.monotonic() + 60
        while True:
            assert proxy.poll() is None, log.read_text()[-2000:]
            assert time.monotonic() < deadline, "the proxy did not start serving HTTP"
            try:
                socket.create_connection((reached, port), timeout=1).close()
                break
            except OSError:
                time.sleep(0.2)
        yield HttpProxy(f"http://{reached}:{port}/mcp", listener)
    finally:
        proxy.terminate()
        try:
            proxy.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proxy.kill()
            proxy.wait()


def test_the_proxy_serves_streamable_http_to_a_real_mcp_client(
    live_server, ledger_token: str, shim: Shim, tmp_path: Path
) -> None:
    (tmp_path / "a.txt").write_text("hello\n")
    note = {"path": str(tmp_path / "b.txt"), "content": "new\n"}

    async def scenario(proxy: HttpProxy) -> tuple[Any, Any, list[Any]]:
        async with proxy.connect() as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            listed = await session.list_tools()
            got = await session.call_tool("read_text_file", {"path": str(tmp_path / "a.txt")})
            shim.arm("write_file", "drop_response")
            writes = [await session.call_tool("write_file", note) for _ in range(2)]
            return listed, got, writes

    upstream = [*FILESYSTEM, str(tmp_path)]
    with _http_proxy(live_server, ledger_token, shim, upstream, "--server", "fs") as proxy:
        listed, got, writes = asyncio.run(scenario(proxy))
    assert "write_file" in {tool.name for tool in listed.tools}
    assert got.is_error is not True and got.structured_content == {"content": "hello\n"}
    assert got.meta[LEDGER_META_KEY]["ok"] is True and len(shim.calls("read_text_file")) == 1
    assert [_code(result) for result in writes] == ["SIDE_EFFECT_UNCERTAIN"] * 2
    assert len(shim.calls("write_file")) == 1  # the retry is refused, not executed


def test_the_proxy_refuses_to_start_without_a_token() -> None:
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "agent_ledger_client.mcp_proxy",
            "--ledger",
            "http://x",
            "--token-env",
            "NO_SUCH_TOKEN_VAR",
            "--",
            "true",
        ],
        capture_output=True,
        text=True,
        check=False,
        env={k: v for k, v in os.environ.items() if k != "NO_SUCH_TOKEN_VAR"},
    )
    assert result.returncode == 2 and "NO_SUCH_TOKEN_VAR holds no ledger token" in result.stderr


def test_a_shadow_session_reads_and_never_calls_a_write_tool(
    live_server, ledger_token: str, shim: Shim, tmp_path: Path
) -> None:
    candidate = candidate_in_shadow()
    tenant = Tenant.objects.get(slug="acme")
    live, _ = start_run(tenant=tenant, user_id="mcp-user", actor="test", run_id="session-1")
    (tmp_path / "a.txt").write_text("hello\n")

    async def scenario(session: ClientSession) -> Any:
        read = await session.call_tool("read_text_file", {"path": str(tmp_path / "a.txt")})
        write = await session.call_tool(
            "write_file", {"path": str(tmp_path / "b.txt"), "content": "new"}
        )
        return read, write

    read, write = _proxied(
        live_server,
        ledger_token,
        shim,
        [*FILESYSTEM, str(tmp_path)],
        scenario,
        "--server",
        "fs",
        "--run-id",
        "session-1.shadow",
        "--shadow-of",
        live.run_id,
        "--combination-id",
        str(candidate.pk),
    )
    assert read.structured_content == {"content": "hello\n"}
    assert len(shim.calls("read_text_file")) == 1
    assert _code(write) == "SHADOW_DRY_RUN" and write.is_error is True
    assert shim.calls("write_file") == [] and not (tmp_path / "b.txt").exists()
    shadow = Run.objects.get(run_id="session-1.shadow")
    assert (shadow.shadow_of_id, shadow.combination_id) == (live.pk, candidate.pk)
