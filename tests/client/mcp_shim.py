"""A fault-injecting stdio shim between an MCP client and a real MCP server.

    python mcp_shim.py --faults FAULTS.json --log CALLS.jsonl -- npx -y @modelcontextprotocol/...

It relays newline-delimited JSON-RPC both ways and logs every ``tools/call`` request it
forwards (so a test counts executions and reads the request's ``_meta``), and every
notification the server sends (``notifications/resources/updated``: a server announcing a
change to state it keeps in memory) to the log's ``.notifications`` sibling. Before each
``tools/call`` it reads FAULTS.json, ``{"tool": "write_file", "mode": "drop_response"}``:

- ``drop_response``: the server gets the call and acts; its response is thrown away;
- ``hang``: the call is never forwarded and never answered;
- ``kill``: the call is forwarded, then the server is killed and the shim exits (a dead server,
  a broken pipe).

A fault fires once (the file is emptied when it does).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import threading
from pathlib import Path
from typing import IO, Any


def _take_fault(faults: Path, tool: str) -> str | None:
    try:
        fault = json.loads(faults.read_text() or "{}")
    except (OSError, ValueError):
        return None
    if fault.get("tool") != tool:
        return None
    faults.write_text("{}")
    return str(fault.get("mode"))


def _relay_responses(
    upstream: IO[bytes], dropped: set[Any], lock: threading.Lock, notifications: Path
) -> None:
    for line in upstream:
        try:
            message = json.loads(line)
        except ValueError:
            message = {}
        if isinstance(message, dict) and "method" in message and "id" not in message:
            with notifications.open("a") as log:
                log.write(json.dumps(message) + "\n")
        with lock:
            if isinstance(message, dict) and message.get("id") in dropped:
                dropped.discard(message.get("id"))
                continue
        sys.stdout.buffer.write(line)
        sys.stdout.buffer.flush()


def notifications_log(log: Path) -> Path:
    """Where the server's notifications go, beside the calls' log."""
    return log.with_suffix(".notifications")


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--faults", type=Path, required=True)
    parser.add_argument("--log", type=Path, required=True)
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    server = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert server.stdin is not None and server.stdout is not None
    dropped: set[Any] = set()
    lock = threading.Lock()
    threading.Thread(
        target=_relay_responses,
        args=(server.stdout, dropped, lock, notifications_log(args.log)),
        daemon=True,
    ).start()
    for line in sys.stdin.buffer:
        try:
            message = json.loads(line)
        except ValueError:
            message = {}
        mode = None
        if isinstance(message, dict) and message.get("method") == "tools/call":
            params = message.get("params") or {}
            with args.log.open("a") as log:
                log.write(json.dumps(params) + "\n")
            mode = _take_fault(args.faults, params.get("name", ""))
        if mode == "hang":
            continue
        if mode == "drop_response":
            with lock:
                dropped.add(message.get("id"))
        server.stdin.write(line)
        server.stdin.flush()
        if mode == "kill":
            server.kill()
            return 1
    server.stdin.close()
    return server.wait()


if __name__ == "__main__":
    sys.exit(main())
