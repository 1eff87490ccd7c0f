"""Which argument decides a tool's class per call, and each kind classified from it."""

from __future__ import annotations

from typing import Any

import pytest

from ledger.classification.arguments import deciding_argument
from ledger.classification.calls import classify_tool_call
from ledger.classification.mcp import classify_mcp_tool
from ledger.domain import ReplayPolicy, ServerTrust
from ledger.models import Tool


def _descriptor(name: str, description: str, **properties: dict[str, Any]) -> dict[str, Any]:
    schema = {"type": "object", "properties": properties}
    return {"name": name, "description": description, "inputSchema": schema}


def _registered(descriptor: dict[str, Any]) -> Tool:
    """The tool as an import would store it (no database needed to classify a call)."""
    stored = classify_mcp_tool(descriptor, trust=ServerTrust.TRUSTED)
    argument = deciding_argument(descriptor)
    return Tool(
        name=f"srv/{descriptor['name']}",
        kind=Tool.Kind.MCP,
        per_call_kind=argument.kind.value if argument else "",
        per_call_argument=argument.name if argument else "",
        idempotency=stored.idempotency.value,
        replay_policy=stored.replay_policy.value,
        destructive=stored.destructive,
        reason=stored.reason,
        rule=stored.rule,
    )


STRING = {"type": "string"}


@pytest.mark.parametrize(
    ("descriptor", "expected"),
    [
        (_descriptor("query", "Run a read-only SQL query", sql=STRING), ("sql", "sql")),
        (_descriptor("read_query", "Execute a SELECT query", query=STRING), ("sql", "query")),
        (_descriptor("search", "Search the web", query=STRING), None),
        (_descriptor("run", "Run in a terminal", command=STRING), ("shell", "command")),
        (
            _descriptor("evaluate", "Execute JavaScript in the page", script=STRING),
            ("code", "script"),
        ),
        (
            _descriptor("write_file", "Write a file", path=STRING, content=STRING),
            ("file_write", "path"),
        ),
        (_descriptor("edit_file", "Edit a file", path=STRING, edits={"type": "array"}), None),
        (_descriptor("query", "Run SQL", sql={"type": "integer"}), None),
    ],
    ids=lambda v: v["name"] if isinstance(v, dict) else str(v),
)
def test_the_deciding_argument_is_found_in_the_schema(
    descriptor: dict[str, Any], expected: tuple[str, str] | None
) -> None:
    found = deciding_argument(descriptor)
    assert (None if found is None else (found.kind.value, found.name)) == expected


def test_a_shell_argument_goes_through_the_command_classifier() -> None:
    tool = _registered(_descriptor("run", "Runs a command in a shell", command=STRING))
    assert classify_tool_call(tool, {"command": "git status"}).replay_policy is ReplayPolicy.AUTO
    removal = classify_tool_call(tool, {"command": "ls; rm -rf /"})
    assert removal.replay_policy is ReplayPolicy.NEVER and removal.destructive


def test_other_code_is_never_whatever_the_call() -> None:
    tool = _registered(
        _descriptor("evaluate", "Execute JavaScript in the page (read-only)", script=STRING)
    )
    assert tool.rule == "mcp.per_call.code"
    assert classify_tool_call(tool, {"script": "1 + 1"}).replay_policy is ReplayPolicy.NEVER
