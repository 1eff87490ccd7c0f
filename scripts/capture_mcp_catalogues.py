#!/usr/bin/env python3
"""Capture the real ``tools/list`` results of official MCP servers into tests/fixtures/mcp/.

    .venv/bin/python scripts/capture_mcp_catalogues.py [--only NAME ...] [--out DIR]

Each server is installed from its registry by name (npm servers through ``npx -y``, PyPI servers
into a throw-away virtual environment), started over stdio, initialised and asked for its tools
over plain JSON-RPC (no SDK model in between, so a result is stored exactly as the server sent
it, even where it bends the schema). Nothing else is called, so servers that need an account get
a placeholder credential they never use. Every result is written unchanged as
``<name>_tools_list.json``, and ``catalogues.json`` records which package and version each file
came from. The classification tests read these files and compare them against the reviewed
tables in tests/classification/catalogue_tables.py: a re-capture that changes a catalogue shows
up there as a tool without a reviewed row.
"""

from __future__ import annotations

import argparse
import json
import os
import selectors
import subprocess
import sys
import tempfile
import time
import venv
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

OUT = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "mcp"
TIMEOUT_SECONDS = 180  # the first npx run downloads the package


@dataclass(frozen=True)
class Server:
    name: str
    registry: str  # "npm" or "pypi"
    package: str
    args: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)
    pins: tuple[str, ...] = ()  # PyPI: requirements the server's own metadata leaves too open


SERVERS = [
    Server("server_filesystem", "npm", "@modelcontextprotocol/server-filesystem", ("{workdir}",)),
    Server("server_memory", "npm", "@modelcontextprotocol/server-memory"),
    Server("server_everything", "npm", "@modelcontextprotocol/server-everything", ("stdio",)),
    Server("server_sequential_thinking", "npm", "@modelcontextprotocol/server-sequential-thinking"),
    Server(
        "server_postgres",
        "npm",
        "@modelcontextprotocol/server-postgres",
        ("postgresql://127.0.0.1:1/unused",),
    ),
    Server(
        "server_github",
        "npm",
        "@modelcontextprotocol/server-github",
        env={"GITHUB_PERSONAL_ACCESS_TOKEN": "unused"},
    ),
    Server(
        "server_gitlab",
        "npm",
        "@modelcontextprotocol/server-gitlab",
        env={"GITLAB_PERSONAL_ACCESS_TOKEN": "unused"},
    ),
    Server(
        "server_slack",
        "npm",
        "@modelcontextprotocol/server-slack",
        env={"SLACK_BOT_TOKEN": "unused", "SLACK_TEAM_ID": "unused"},
    ),
    Server(
        "server_redis",
        "npm",
        "@modelcontextprotocol/server-redis",
        ("redis://127.0.0.1:6379/4",),
    ),
    Server(
        "server_brave_search",
        "npm",
        "@modelcontextprotocol/server-brave-search",
        env={"BRAVE_API_KEY": "unused"},
    ),
    Server(
        "server_google_maps",
        "npm",
        "@modelcontextprotocol/server-google-maps",
        env={"GOOGLE_MAPS_API_KEY": "unused"},
    ),
    Server("mcp_server_git", "pypi", "mcp-server-git"),
    Server("mcp_server_fetch", "pypi", "mcp-server-fetch"),
    Server("mcp_server_time", "pypi", "mcp-server-time"),
    Server(
        "mcp_server_sqlite",
        "pypi",
        "mcp-server-sqlite",
        ("--db-path", "{workdir}/capture.db"),
        pins=("mcp<2",),  # it uses the 1.x server API that mcp 2 removed
    ),
]


def _pypi_server(server: Server, envs: Path) -> tuple[str, str]:
    """A virtual environment with only this server in it; the server's program and version."""
    home = envs / server.name
    venv.EnvBuilder(with_pip=True).create(home)
    python = str(home / "bin" / "python")
    subprocess.run(  # noqa: S603 - fixed arguments
        [python, "-m", "pip", "install", "--quiet", server.package, *server.pins], check=True
    )
    shown = subprocess.run(  # noqa: S603
        [python, "-m", "pip", "show", server.package], check=True, capture_output=True, text=True
    )
    version = next(
        line.split(":", 1)[1].strip()
        for line in shown.stdout.splitlines()
        if line.startswith("Version:")
    )
    return str(home / "bin" / server.package), version


def _npm_version(package: str) -> str:
    shown = subprocess.run(  # noqa: S603
        ["npm", "view", package, "version"],  # noqa: S607
        check=True,
        capture_output=True,
        text=True,
    )
    return shown.stdout.strip()


def _response(stdout: IO[str], request_id: int, deadline: float) -> dict[str, Any]:
    """The result of request ``request_id``; notifications and log lines are skipped."""
    selector = selectors.DefaultSelector()
    selector.register(stdout, selectors.EVENT_READ)
    while time.monotonic() < deadline:
        if not selector.select(timeout=deadline - time.monotonic()):
            break
        line = stdout.readline()
        if not line:
            raise RuntimeError("the server closed its output")
        try:
            message = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(message, dict) and message.get("id") == request_id:
            if "error" in message:
                raise RuntimeError(f"the server answered an error: {message['error']}")
            return message["result"]
    raise TimeoutError(f"no answer within {TIMEOUT_SECONDS} s")


def _tools_list(command: str, argv: list[str], env: dict[str, str], cwd: Path) -> dict[str, Any]:
    """initialize, notifications/initialized, then tools/list until there is no nextCursor."""
    with (
        (cwd / "server.log").open("w") as log,
        subprocess.Popen(  # noqa: S603 - the servers of the fixed list above
            [command, *argv],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=log,
            text=True,
            env=env,
            cwd=cwd,
        ) as server,
    ):
        assert server.stdin is not None and server.stdout is not None
        deadline = time.monotonic() + TIMEOUT_SECONDS

        def send(message: dict[str, Any]) -> None:
            assert server.stdin is not None
            server.stdin.write(json.dumps({"jsonrpc": "2.0", **message}) + "\n")
            server.stdin.flush()

        try:
            send(
                {
                    "id": 1,
                    "method": "initialize",
                    "params": {
                        "protocolVersion": "2025-06-18",
                        "capabilities": {},
                        "clientInfo": {"name": "agent-ledger-capture", "version": "1"},
                    },
                }
            )
            _response(server.stdout, 1, deadline)
            send({"method": "notifications/initialized"})
            tools: list[Any] = []
            result: dict[str, Any] = {}
            cursor = None
            for request_id in range(2, 100):
                send(
                    {
                        "id": request_id,
                        "method": "tools/list",
                        "params": {"cursor": cursor} if cursor else {},
                    }
                )
                result = _response(server.stdout, request_id, deadline)
                tools.extend(result.get("tools", []))
                cursor = result.get("nextCursor")
                if not cursor:
                    break
            return {**result, "tools": tools}
        finally:
            server.terminate()


def capture(server: Server, workdir: Path, envs: Path) -> tuple[dict[str, Any], str]:
    """The server's tools/list result and the package version it came from."""
    args = [a.format(workdir=workdir) for a in server.args]
    if server.registry == "npm":
        version = _npm_version(server.package)
        command, argv = "npx", ["-y", f"{server.package}@{version}", *args]
    else:
        command, version = _pypi_server(server, envs)
        argv = args
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(workdir), **server.env}
    return _tools_list(command, argv, env, workdir), version


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="*", help="capture only these servers (by file name)")
    parser.add_argument("--out", type=Path, default=OUT)
    options = parser.parse_args()
    chosen = [s for s in SERVERS if not options.only or s.name in options.only]
    options.out.mkdir(parents=True, exist_ok=True)
    manifest_path = options.out / "catalogues.json"
    manifest = json.loads(manifest_path.read_text()) if manifest_path.exists() else {}
    failed = []
    with tempfile.TemporaryDirectory() as scratch:
        workdir, envs = Path(scratch) / "work", Path(scratch) / "envs"
        workdir.mkdir()
        envs.mkdir()
        for server in chosen:
            try:
                result, version = capture(server, workdir, envs)
            except Exception as exc:  # one broken server must not stop the others
                log = workdir / "server.log"
                tail = log.read_text()[-2000:] if log.exists() else ""
                print(f"{server.name}: not captured: {exc!r}\n{tail}", file=sys.stderr)
                failed.append(server.name)
                continue
            path = options.out / f"{server.name}_tools_list.json"
            path.write_text(json.dumps(result, indent=1, ensure_ascii=False) + "\n")
            manifest[path.name] = {
                "registry": server.registry,
                "package": server.package,
                "version": version,
            }
            print(f"{server.name}: {len(result.get('tools', []))} tools ({version})")
    manifest_path.write_text(json.dumps(dict(sorted(manifest.items())), indent=1) + "\n")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
