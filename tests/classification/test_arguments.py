"""Which argument decides a tool's class per call, and each kind classified from it."""

from __future__ import annotations

from typing import Any

import pytest

from ledger.classification.arguments import deciding_argument
from ledger.classification.calls import classify_tool_call
from ledger.classification.mcp import classify_mcp_tool
from ledger.domain import ReplayPolicy, ServerTrust
from ledger.errors import InvalidInput
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
STRINGS = {"type": "array", "items": STRING}
NESTED_SQL = {"type": "object", "properties": {"sql": STRING}}
WAREHOUSE = "Query the data warehouse."
# Whole-file writes by their arguments whose name or description names another effect.
WRITES_WITH_OTHER_EFFECTS = [
    ("write_file_and_notify", "Write a file.", {"path": STRING, "content": STRING}),
    ("save_and_send", "Save a file.", {"path": STRING, "content": STRING}),
    ("store_and_publish", "Store a file.", {"path": STRING, "content": STRING}),
    ("put_object", "Upload an object to S3.", {"file": STRING, "body": STRING}),
    ("write_file", "Write a file and email it to the team.", {"path": STRING, "text": STRING}),
    ("write_file", "Writes the file and messages the team.", {"path": STRING, "content": STRING}),
]


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
        (_descriptor("query", WAREHOUSE, sql_text=STRING), ("sql", "sql_text")),
        (_descriptor("query", WAREHOUSE, sqlStatement=STRING), ("sql", "sqlStatement")),
        (_descriptor("query", WAREHOUSE, stmt=STRING), ("sql", "stmt")),
        (_descriptor("query", WAREHOUSE, sql={"type": ["string", "null"]}), ("sql", "sql")),
        (_descriptor("query", WAREHOUSE, statements=STRINGS), ("sql", "statements")),
        (_descriptor("query", WAREHOUSE, request=NESTED_SQL), ("code", "request")),
        (_descriptor("ask", "Run a postgres query", query=STRING), ("sql", "query")),
        (_descriptor("ask", "Query the sqlite database", query=STRING), ("sql", "query")),
        (_descriptor("query", WAREHOUSE, text=STRING), ("code", "text")),
        (_descriptor("execute", "Execute it", payload=STRING), ("code", "payload")),
        (_descriptor("get_statement", "Get a bank statement", statement_date=STRING), None),
        (_descriptor("search", "Search. Select a result.", query=STRING), None),
        (_descriptor("save", "Save a file.", path=STRING, content=STRING), ("file_write", "path")),
        *[
            (_descriptor(name, description, **arguments), None)
            for name, description, arguments in WRITES_WITH_OTHER_EFFECTS
        ],
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


@pytest.mark.parametrize(
    "properties",
    [
        {"sql_text": STRING},
        {"sql": {"type": ["string", "null"]}},
        {"statements": STRINGS},
        {"request": NESTED_SQL},
        {"text": STRING},
    ],
    ids=str,
)
def test_an_untrusted_query_tool_is_never_whatever_its_sql_argument_is_called(
    properties: dict[str, Any],
) -> None:
    descriptor = _descriptor("query", WAREHOUSE, **properties)
    result = classify_mcp_tool(descriptor, trust=ServerTrust.UNTRUSTED)
    assert result.replay_policy is ReplayPolicy.NEVER, result.reason


def test_each_statement_of_an_array_argument_is_classified() -> None:
    tool = _registered(_descriptor("query", WAREHOUSE, statements=STRINGS))
    reads = classify_tool_call(tool, {"statements": ["SELECT 1", "SELECT 2"]})
    dropping = classify_tool_call(tool, {"statements": ["SELECT 1", "DROP TABLE t"]})
    assert reads.replay_policy is ReplayPolicy.AUTO
    assert dropping.replay_policy is ReplayPolicy.NEVER and dropping.destructive
    assert classify_tool_call(tool, {"statements": []}).replay_policy is ReplayPolicy.NEVER
    with pytest.raises(InvalidInput):
        classify_tool_call(tool, {"statements": ["SELECT 1", 2]})


@pytest.mark.parametrize(
    ("name", "description", "arguments"),
    WRITES_WITH_OTHER_EFFECTS,
    ids=[name for name, _, _ in WRITES_WITH_OTHER_EFFECTS],
)
def test_a_file_write_with_another_effect_keeps_it_on_every_call(
    name: str, description: str, arguments: dict[str, Any]
) -> None:
    tool = _registered(_descriptor(name, description, **arguments))
    call = classify_tool_call(tool, {"path": "/ws/a.txt", "file": "/ws/a.txt", "content": "x"})
    assert call.replay_policy is ReplayPolicy.NEVER, call.reason


@pytest.mark.parametrize("decided_by", ["override", "policy"])
def test_a_loosening_decision_does_not_clear_a_refused_statement(decided_by: str) -> None:
    tool = _registered(_descriptor("query", "Run a read-only SQL query", sql=STRING))
    tool.idempotency, tool.replay_policy, tool.destructive = "idempotent", "auto", False
    if decided_by == "override":
        tool.override_idempotency = "idempotent"
    else:
        tool.rule = "policy.pattern"
    dropping = classify_tool_call(tool, {"sql": "COMMIT; DROP SCHEMA public CASCADE"})
    assert dropping.replay_policy is ReplayPolicy.NEVER and dropping.destructive
    assert classify_tool_call(tool, {"sql": "SELECT 1"}).replay_policy is ReplayPolicy.AUTO
