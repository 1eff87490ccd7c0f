"""The server behind the proxy: it inherits the proxy's environment except the ledger's token;
when it cannot start, the proxy exits non-zero saying how it ended and what it last wrote to
stderr; and a server that needs another MCP library than the client's (mcp-server-sqlite, on
the 1.x SDK) runs from an environment of its own."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from mcp import ClientSession

from agent_ledger_client.mcp_guard import LEDGER_META_KEY
from ledger.models import IdempotencyRecord
from tests.client.test_mcp_guard_servers import FILESYSTEM, Shim
from tests.client.test_mcp_proxy import _proxied

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]
NEEDS_NPX = pytest.mark.skipif(shutil.which("npx") is None, reason="needs Node (npx)")
MEMORY = ["npx", "-y", "@modelcontextprotocol/server-memory"]
#: Writes its environment as JSON to argv[1], then becomes the command after it.
ENVIRONMENT_DUMP = (
    "import json, os, sys; open(sys.argv[1], 'w').write(json.dumps(dict(os.environ))); "
    "os.execvp(sys.argv[2], sys.argv[2:])"
)


@pytest.fixture
def shim(tmp_path: Path) -> Shim:
    return Shim(tmp_path)


@NEEDS_NPX
def test_the_server_inherits_the_proxy_s_environment_but_not_the_ledger_token(
    live_server, ledger_token: str, shim: Shim, tmp_path: Path
) -> None:
    graph = tmp_path / "graph.jsonl"
    seen = tmp_path / "environment.json"
    upstream = [sys.executable, "-c", ENVIRONMENT_DUMP, str(seen), *MEMORY]
    ada = {"name": "Ada", "entityType": "person", "observations": ["likes tea"]}

    async def scenario(session: ClientSession) -> Any:
        return await session.call_tool("create_entities", {"entities": [ada]})

    result = _proxied(
        live_server,
        ledger_token,
        shim,
        upstream,
        scenario,
        "--server",
        "memory",
        environment={"MEMORY_FILE_PATH": str(graph), "UPSTREAM_API_KEY": "upstream-secret"},
    )
    assert result.is_error is not True, result
    assert "Ada" in graph.read_text()  # the server read MEMORY_FILE_PATH from the proxy's
    environment = json.loads(seen.read_text())
    assert environment["UPSTREAM_API_KEY"] == "upstream-secret"
    assert "LEDGER_TOKEN" not in environment
    assert ledger_token not in environment.values()


def _proxy_exit(live_server: Any, token: str, upstream: list[str]) -> subprocess.CompletedProcess:
    """The proxy started over stdio as an MCP host starts it, in front of ``upstream``."""
    command = [
        sys.executable,
        "-m",
        "agent_ledger_client.mcp_proxy",
        "--ledger",
        live_server.url,
        "--token-env",
        "LEDGER_TOKEN",
        "--",
        *upstream,
    ]
    return subprocess.run(
        command,
        stdin=subprocess.PIPE,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "LEDGER_TOKEN": token},
        check=False,
    )


def test_a_server_that_exits_on_start_is_reported_with_its_status_and_stderr(
    live_server, ledger_token: str
) -> None:
    dies = "import sys; print('cannot open /nowhere/db.sqlite', file=sys.stderr); sys.exit(3)"
    result = _proxy_exit(live_server, ledger_token, [sys.executable, "-c", dies])
    assert result.returncode == 1, result.stderr
    last = result.stderr.strip().splitlines()[-2:]
    assert "exited with status 3" in last[0], result.stderr
    assert last[1].strip() == "cannot open /nowhere/db.sqlite", result.stderr


def test_a_server_killed_while_starting_is_reported_with_its_signal(
    live_server, ledger_token: str
) -> None:
    dies = "import os, signal; os.kill(os.getpid(), signal.SIGKILL)"
    result = _proxy_exit(live_server, ledger_token, [sys.executable, "-c", dies])
    assert result.returncode == 1, result.stderr
    assert "killed by signal SIGKILL" in result.stderr and "wrote nothing" in result.stderr


@NEEDS_NPX
def test_a_real_server_given_a_wrong_argument_is_reported(
    live_server, ledger_token: str, tmp_path: Path
) -> None:
    result = _proxy_exit(live_server, ledger_token, [*FILESYSTEM, str(tmp_path / "missing")])
    assert result.returncode == 1, result.stderr
    assert "exited with status 1" in result.stderr, result.stderr
    assert "None of the specified directories are accessible" in result.stderr


def test_a_command_that_cannot_run_is_reported(live_server, ledger_token: str) -> None:
    result = _proxy_exit(live_server, ledger_token, ["agent-ledger-no-such-server"])
    assert result.returncode == 1, result.stderr
    assert "could not start agent-ledger-no-such-server" in result.stderr


def test_the_proxy_fronts_mcp_server_sqlite_and_a_lost_insert_runs_once(
    live_server, ledger_token: str, shim: Shim, tmp_path: Path, sqlite_server: Path
) -> None:
    database = tmp_path / "shop.db"
    insert = {"query": "INSERT INTO orders (cart) VALUES ('cart-42')"}

    async def scenario(session: ClientSession) -> list[Any]:
        listed = await session.list_tools()
        made = await session.call_tool(
            "create_table", {"query": "CREATE TABLE orders (id INTEGER PRIMARY KEY, cart TEXT)"}
        )
        shim.arm("write_query", "drop_response")
        inserts = [await session.call_tool("write_query", insert) for _attempt in range(2)]
        counted = await session.call_tool(
            "read_query", {"query": "SELECT count(*) AS n FROM orders"}
        )
        return [listed, made, *inserts, counted]

    listed, made, first, again, counted = _proxied(
        live_server,
        ledger_token,
        shim,
        [str(sqlite_server), "--db-path", str(database)],
        scenario,
        "--server",
        "sqlite",
        "--no-wait-for-approval",
    )
    assert {"read_query", "write_query", "create_table"} <= {tool.name for tool in listed.tools}
    assert made.is_error is not True, made
    codes = [result.meta[LEDGER_META_KEY]["code"] for result in (first, again)]
    assert codes[0] == "SIDE_EFFECT_UNCERTAIN", codes
    assert codes[1] in {"SIDE_EFFECT_UNCERTAIN", "APPROVAL_REQUIRED"}, codes
    assert len(shim.calls("write_query")) == 1
    assert counted.is_error is not True and counted.content[0].text == "[{'n': 1}]", counted
    assert IdempotencyRecord.objects.filter(tool__name="sqlite/read_query").count() == 1
