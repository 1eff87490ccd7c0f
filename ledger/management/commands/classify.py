"""``manage.py classify``: the classifier without a server (DESIGN section 2).

    classify --mcp FILE --trust trusted|untrusted   # an MCP tools/list result
    classify --mcp FILE --report [--trust ...]      # the same, as a report for people
    classify --server NAME --tenant SLUG --report   # an imported server, from the registry
    classify --commands FILE                        # a JSON array of command strings

Prints a JSON array of {name|command, idempotency, replay_policy, destructive, reason}. FILE may
be ``-`` for standard input. ``--report`` prints a table instead: per tool its class, the rule
and the words or argument that decided it, and what registering the server with the other
trust would change (untrusted by default; an imported server's own trust). For an imported
server the class is the registry's, org policy and overrides included.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from ledger.classification import Classification
from ledger.classification.arguments import deciding_argument
from ledger.classification.calls import stored_classification
from ledger.classification.mcp import classify_mcp_tool
from ledger.classification.shell import classify_command
from ledger.classification.words import catalogue_namespace
from ledger.domain import PerCall, ServerTrust
from ledger.models import McpServer, Tool


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
        source.add_argument("--server", help="with --tenant and --report: an imported MCP server")
        parser.add_argument("--tenant", metavar="SLUG", help="the tenant that imported --server")
        parser.add_argument(
            "--trust",
            choices=[t.value for t in ServerTrust],
            help="trust level of the MCP server (required with --mcp, unless --report)",
        )
        parser.add_argument(
            "--report", action="store_true", help="with --mcp: a table for people, not JSON"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        if options["server"]:
            if not (options["tenant"] and options["report"]) or options["trust"]:
                raise CommandError("--server needs --tenant and --report (and takes no --trust)")
            self.stdout.write(_server_report(options["tenant"], options["server"]))
            return
        if options["tenant"]:
            raise CommandError("--tenant only applies to --server")
        if options["mcp"]:
            if options["report"]:
                trust = ServerTrust(options["trust"] or ServerTrust.UNTRUSTED)
                mine = _classified(options["mcp"], trust)
                theirs = _classified(options["mcp"], _other(trust))
                title = f"{options['mcp']}, registered {trust.value}"
                self.stdout.write(_report(title, mine, theirs, _other(trust)))
                return
            rows = self._mcp(options["mcp"], options["trust"])
        else:
            if options["trust"] or options["report"]:
                raise CommandError("--trust and --report only apply to --mcp")
            rows = self._commands(options["commands"])
        self.stdout.write(json.dumps(rows, indent=2, ensure_ascii=False))

    def _mcp(self, path: str, trust: str | None) -> list[dict[str, Any]]:
        if trust is None:
            raise CommandError("--mcp needs --trust trusted|untrusted")
        return [
            _row("name", tool["name"], classification)
            for tool, classification in _classified(path, ServerTrust(trust))
        ]

    def _commands(self, path: str) -> list[dict[str, Any]]:
        data = _load(path)
        if not isinstance(data, list) or not all(isinstance(c, str) for c in data):
            raise CommandError(f"{path}: expected a JSON array of command strings")
        return [_row("command", command, classify_command(command)) for command in data]


Classified = list[tuple[dict[str, Any], Classification]]


def _classified(path: str, trust: ServerTrust) -> Classified:
    """Each tool of the tools/list result in ``path`` with its classification."""
    data = _load(path)
    tools = data.get("tools") if isinstance(data, dict) else None
    if not isinstance(tools, list):
        raise CommandError(f"{path}: expected a JSON object with a top-level 'tools' array")
    names = [t.get("name") if isinstance(t, dict) else None for t in tools]
    namespace = catalogue_namespace([n for n in names if isinstance(n, str)])
    classified = []
    for index, tool in enumerate(tools):
        try:
            classification = classify_mcp_tool(tool, trust=trust, namespace=namespace)
        except ValueError as exc:
            raise CommandError(f"{path}: tools[{index}]: {exc}") from None
        classified.append((tool, classification))
    return classified


def _label(classification: Classification) -> str:
    label = f"{classification.idempotency.value}/{classification.replay_policy.value}"
    return label + (", destructive" if classification.destructive else "")


def _per_call_note(tool: dict[str, Any]) -> str:
    argument = deciding_argument(tool)
    if argument is None:
        return ""
    if argument.kind is PerCall.FILE_WRITE:
        return (
            f" Per call: conditional/ask where a registered workspace root covers "
            f"'{argument.name}'."
        )
    return f" Per call: from the {argument.kind.value} in '{argument.name}'."


def _other(trust: ServerTrust) -> ServerTrust:
    return ServerTrust.TRUSTED if trust is ServerTrust.UNTRUSTED else ServerTrust.UNTRUSTED


def _server_report(tenant: str, server_name: str) -> str:
    """The report of a server a tenant imported: the registry's classes, and what the other
    trust would give each tool's descriptor."""
    server = McpServer.objects.filter(tenant__slug=tenant, name=server_name).first()
    if server is None:
        raise CommandError(f"tenant {tenant!r} has imported no MCP server {server_name!r}")
    tools = list(Tool.objects.filter(server=server).order_by("pk"))
    namespace = catalogue_namespace([str(t.descriptor.get("name", "")) for t in tools])
    other = _other(ServerTrust(server.trust))
    mine = [(t.descriptor, stored_classification(t)) for t in tools]
    theirs = [
        (t.descriptor, classify_mcp_tool(t.descriptor, trust=other, namespace=namespace))
        for t in tools
    ]
    title = f"server {server_name!r} of tenant {tenant!r}, registered {server.trust}"
    return _report(title, mine, theirs, other)


def _report(title: str, mine: Classified, theirs: Classified, other: ServerTrust) -> str:
    lines = [
        f"Classification of {title}",
        "",
        f"| tool | class | decided by | registered {other.value} |",
        "|---|---|---|---|",
    ]
    counts: dict[str, int] = {}
    for (tool, result), (_, alternative) in zip(mine, theirs, strict=True):
        counts[result.replay_policy.value] = counts.get(result.replay_policy.value, 0) + 1
        change = (
            "no change"
            if (alternative.idempotency, alternative.destructive)
            == (result.idempotency, result.destructive)
            else f"{_label(alternative)} ({alternative.rule}): {alternative.reason}"
        )
        decided = f"{result.rule}: {result.reason}{_per_call_note(tool)}"
        cells = [str(tool["name"]), _label(result), decided, change]
        lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    summary = ", ".join(f"{counts.get(p, 0)} {p}" for p in ("auto", "ask", "never"))
    lines += ["", f"{len(mine)} tools: {summary}.", ""]
    return "\n".join(lines)
