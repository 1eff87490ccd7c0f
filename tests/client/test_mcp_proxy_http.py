"""The proxy's streamable-HTTP listener, asked with real HTTP requests: it starts only with a
bearer token of its own, answers 401 to a request without it, and refuses a foreign ``Host`` or
``Origin`` on every request (a DNS-rebinding defence); with its token, the official MCP client
lists and calls the tools."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest
from mcp import ClientSession

from agent_ledger_client.mcp_guard import LEDGER_META_KEY
from tests.client.test_mcp_guard_servers import Shim
from tests.client.test_mcp_proxy import GIT, HttpProxy, _http_proxy

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "probe", "version": "0"},
    },
}
STATUS = {
    "jsonrpc": "2.0",
    "id": 2,
    "method": "tools/call",
    "params": {"name": "git_status", "arguments": {}},
}
ALLOWED_HOST = "mcp.internal"
ALLOWED_ORIGIN = "http://inspector.internal:6274"


@pytest.fixture
def shim(tmp_path: Path) -> Shim:
    return Shim(tmp_path)


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    folder = tmp_path / "repo"
    subprocess.run(["git", "init", "-q", str(folder)], check=True)
    return folder


def _serving(
    live_server: Any, ledger_token: str, shim: Shim, repo: Path, bind: str
) -> Iterator[HttpProxy]:
    upstream = [*GIT, "--repository", str(repo)]
    options = ["--server", "git", "--allowed-host", ALLOWED_HOST]
    options += ["--allowed-origin", ALLOWED_ORIGIN]
    with _http_proxy(live_server, ledger_token, shim, upstream, *options, bind=bind) as serving:
        yield serving


@pytest.fixture
def proxy(live_server, ledger_token: str, shim: Shim, repo: Path) -> Iterator[HttpProxy]:
    yield from _serving(live_server, ledger_token, shim, repo, "127.0.0.1")


#: The listener on another loopback address and on every address: the token, Host and Origin
#: are checked there as on the default one (the tests below).
OTHER_BINDS = ["127.0.0.2", "0.0.0.0"]  # noqa: S104 - the addresses under test


def _post(proxy: HttpProxy, message: dict[str, Any], **headers: str) -> httpx.Response:
    return httpx.post(
        proxy.url,
        json=message,
        headers={"Accept": "application/json, text/event-stream", **headers},
        timeout=30,
    )


def _bearer(proxy: HttpProxy) -> str:
    return f"Bearer {proxy.token}"


def test_a_request_without_the_token_is_401_and_runs_nothing(proxy: HttpProxy, shim: Shim) -> None:
    answers = [_post(proxy, message) for message in (INITIALIZE, STATUS)]
    assert [answer.status_code for answer in answers] == [401, 401]
    assert all(a.headers["WWW-Authenticate"].startswith("Bearer") for a in answers)
    assert shim.calls("git_status") == []


def test_a_wrong_token_is_401(proxy: HttpProxy) -> None:
    for wrong in (f"Bearer {proxy.token[:-1]}x", "Bearer", f"Basic {proxy.token}", proxy.token):
        assert _post(proxy, INITIALIZE, Authorization=wrong).status_code == 401, wrong


def _foreign_hosts_refused(proxy: HttpProxy) -> None:
    port = urlsplit(proxy.url).port
    for host in (f"attacker.example:{port}", "attacker.example", f"{ALLOWED_HOST}.attacker:{port}"):
        answer = _post(proxy, INITIALIZE, Authorization=_bearer(proxy), Host=host)
        assert answer.status_code in (421, 403), host


def _foreign_origins_refused(proxy: HttpProxy) -> None:
    port = urlsplit(proxy.url).port
    for origin in ("http://attacker.example", f"http://attacker.example:{port}", "null"):
        answer = _post(proxy, INITIALIZE, Authorization=_bearer(proxy), Origin=origin)
        assert answer.status_code == 403, origin


def test_a_foreign_host_is_refused(proxy: HttpProxy) -> None:
    _foreign_hosts_refused(proxy)


def test_a_foreign_origin_is_refused(proxy: HttpProxy) -> None:
    _foreign_origins_refused(proxy)


@pytest.mark.parametrize("bind", OTHER_BINDS)
def test_on_any_address_the_token_host_and_origin_are_checked(
    bind: str, live_server, ledger_token: str, shim: Shim, repo: Path
) -> None:
    for proxy in _serving(live_server, ledger_token, shim, repo, bind):
        assert [_post(proxy, m).status_code for m in (INITIALIZE, STATUS)] == [401, 401]
        assert shim.calls("git_status") == []
        _foreign_hosts_refused(proxy)
        _foreign_origins_refused(proxy)
        # The refusals are the checks', not a listener that serves nothing.
        host = urlsplit(proxy.url).netloc
        answer = _post(proxy, INITIALIZE, Authorization=_bearer(proxy), Host=host)
        assert answer.status_code == 200, answer.text


def test_the_bound_address_its_localhost_forms_and_allowed_hosts_are_served(
    proxy: HttpProxy,
) -> None:
    port = urlsplit(proxy.url).port
    hosts = [f"127.0.0.1:{port}", f"localhost:{port}", f"LOCALHOST:{port}", ALLOWED_HOST]
    origins = [f"http://localhost:{port}", f"http://127.0.0.1:{port}", ALLOWED_ORIGIN]
    for host in hosts:
        answer = _post(proxy, INITIALIZE, Authorization=_bearer(proxy), Host=host)
        assert answer.status_code == 200, (host, answer.text)
    for origin in origins:
        answer = _post(proxy, INITIALIZE, Authorization=_bearer(proxy), Origin=origin)
        assert answer.status_code == 200, (origin, answer.text)


def test_the_official_client_with_the_token_lists_and_calls_the_tools(
    proxy: HttpProxy, shim: Shim, repo: Path
) -> None:
    async def scenario() -> tuple[Any, Any]:
        async with proxy.connect() as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            listed = await session.list_tools()
            return listed, await session.call_tool("git_status", {"repo_path": str(repo)})

    listed, status = asyncio.run(scenario())
    assert "git_status" in {tool.name for tool in listed.tools}
    assert status.is_error is not True and status.meta[LEDGER_META_KEY]["ok"] is True
    assert len(shim.calls("git_status")) == 1


@pytest.mark.parametrize("address", ["127.0.0.1:8765", "0.0.0.0:8765", "[::1]:8765"])
@pytest.mark.parametrize("token_option", [[], ["--http-token-env", "EMPTY_PROXY_TOKEN"]])
def test_the_listener_refuses_to_start_without_its_token(
    address: str, token_option: list[str]
) -> None:
    command = [
        sys.executable,
        "-m",
        "agent_ledger_client.mcp_proxy",
        "--ledger",
        "http://127.0.0.1:9",
        "--token-env",
        "LEDGER_TOKEN",
        "--http",
        address,
        *token_option,
        "--",
        *GIT,
    ]
    environment = {**os.environ, "LEDGER_TOKEN": "al_ledger", "EMPTY_PROXY_TOKEN": ""}
    result = subprocess.run(
        command, capture_output=True, text=True, timeout=60, env=environment, check=False
    )
    assert result.returncode == 2, result.stderr
    assert "the HTTP listener needs a bearer token" in result.stderr


def test_the_listener_refuses_the_ledger_token_as_its_own() -> None:
    command = [
        sys.executable,
        "-m",
        "agent_ledger_client.mcp_proxy",
        "--ledger",
        "http://127.0.0.1:9",
        "--token-env",
        "LEDGER_TOKEN",
        "--http",
        "127.0.0.1:8765",
        "--http-token-env",
        "LEDGER_TOKEN",
        "--",
        *GIT,
    ]
    environment = {**os.environ, "LEDGER_TOKEN": "al_ledger"}
    result = subprocess.run(
        command, capture_output=True, text=True, timeout=60, env=environment, check=False
    )
    assert result.returncode == 2 and "must not be the ledger token" in result.stderr, result.stderr
