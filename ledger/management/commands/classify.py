"""``manage.py classify``: the classifier without a server (DESIGN section 2).

    classify --mcp FILE --trust trusted|untrusted   # an MCP tools/list result
    classify --commands FILE                        # a JSON array of command strings

Prints a JSON array of {name|command, idempotency, replay_policy, destructive, reason}. FILE may
be ``-`` for standard input.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from ledger.classification.commands import classify_command
from ledger.classification.mcp import classify_mcp_tool
from ledger.domain import ServerTrust


def _load(path: str) -> Any:
    try:
        text = sys.stdin.read() if path == "-" else Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise CommandError(f"cannot read {path}: {exc.strerror}") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise CommandError(f"{path} is not valid JSON: {exc}") from None


def _row(label: str, value: str, classification: Any) -> dict[str, Any]:
    data = classification.as_dict()
    return {
        label: value,
        "idempotency": data["idempotency"],
        "replay_policy": data["replay_policy"],
        "destructive": data["destructive"],
        "reason": data["reason"],
    }


class Command(BaseCommand):
    help = "Classify MCP tools or shell commands and print the result as JSON."

    def add_arguments(self, parser: CommandParser) -> None:
        source = parser.add_mutually_exclusive_group(required=True)
        source.add_argument("--mcp", metavar="FILE", help="an MCP tools/list result (JSON)")
        source.add_argument("--commands", metavar="FILE", help="a JSON array of command strings")
        parser.add_argument(
            "--trust",
            choices=[t.value for t in ServerTrust],
            help="trust level of the MCP server (required with --mcp)",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        if options["mcp"]:
            rows = self._mcp(options["mcp"], options["trust"])
        else:
            if options["trust"]:
                raise CommandError("--trust only applies to --mcp")
            rows = self._commands(options["commands"])
        self.stdout.write(json.dumps(rows, indent=2, ensure_ascii=False))

    def _mcp(self, path: str, trust: str | None) -> list[dict[str, Any]]:
        if trust is None:
            raise CommandError("--mcp needs --trust trusted|untrusted")
        data = _load(path)
        tools = data.get("tools") if isinstance(data, dict) else None
        if not isinstance(tools, list):
            raise CommandError(f"{path}: expected a JSON object with a top-level 'tools' array")
        rows = []
        for index, tool in enumerate(tools):
            try:
                classification = classify_mcp_tool(tool, trust=ServerTrust(trust))
            except ValueError as exc:
                raise CommandError(f"{path}: tools[{index}]: {exc}") from None
            rows.append(_row("name", tool["name"], classification))
        return rows

    def _commands(self, path: str) -> list[dict[str, Any]]:
        data = _load(path)
        if not isinstance(data, list) or not all(isinstance(c, str) for c in data):
            raise CommandError(f"{path}: expected a JSON array of command strings")
        return [_row("command", command, classify_command(command)) for command in data]
