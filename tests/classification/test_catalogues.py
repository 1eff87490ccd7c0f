"""The captured real catalogues, classified as the reviewed tables say."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from ledger.classification import Classification
from ledger.classification.arguments import deciding_argument
from ledger.classification.calls import classify_tool_call
from ledger.classification.mcp import classify_mcp_tool
from ledger.classification.words import catalogue_namespace
from ledger.domain import PerCall, ReplayPolicy, ServerTrust
from ledger.models import Tool
from tests.classification.catalogue_tables import (
    READ,
    READS_NOT_AUTO_UNTRUSTED,
    TABLES,
    WRITE,
)

FIXTURES = Path(__file__).parent.parent / "fixtures" / "mcp"
CATALOGUES = {
    path.name.removesuffix("_tools_list.json"): json.loads(path.read_text())["tools"]
    for path in sorted(FIXTURES.glob("*_tools_list.json"))
}
TOOLS = [(server, tool) for server, tools in CATALOGUES.items() for tool in tools]
TRUSTS = [ServerTrust.UNTRUSTED, ServerTrust.TRUSTED]


def _classify(server: str, tool: dict[str, Any], trust: ServerTrust) -> Classification:
    namespace = catalogue_namespace([t["name"] for t in CATALOGUES[server]])
    return classify_mcp_tool(tool, trust=trust, namespace=namespace)


def _call(tool: dict[str, Any], stored: Classification, tool_input: dict[str, Any]) -> Any:
    """One call of a code-carrying tool, as the registry would hold it."""
    argument = deciding_argument(tool)
    assert argument is not None
    row = Tool(
        name=tool["name"],
        kind=Tool.Kind.MCP,
        per_call_kind=argument.kind.value,
        per_call_argument=argument.name,
        idempotency=stored.idempotency.value,
        replay_policy=stored.replay_policy.value,
        destructive=stored.destructive,
        reason=stored.reason,
        rule=stored.rule,
    )
    return classify_tool_call(row, {argument.name: tool_input})


def test_every_official_server_listed_in_the_issue_was_captured() -> None:
    wanted = {
        "server_filesystem",
        "mcp_server_git",
        "server_memory",
        "mcp_server_fetch",
        "mcp_server_time",
        "server_everything",
        "mcp_server_sqlite",
        "server_sequential_thinking",
    }
    assert wanted <= set(CATALOGUES)
    manifest = json.loads((FIXTURES / "catalogues.json").read_text())
    assert {f"{name}_tools_list.json" for name in CATALOGUES} == set(manifest)


@pytest.mark.parametrize("server", sorted(CATALOGUES))
def test_every_captured_tool_has_a_reviewed_row(server: str) -> None:
    assert {t["name"] for t in CATALOGUES[server]} == set(TABLES[server])


@pytest.mark.parametrize(("server", "tool"), TOOLS, ids=[f"{s}/{t['name']}" for s, t in TOOLS])
def test_tool_is_classified_as_reviewed(server: str, tool: dict[str, Any]) -> None:
    row = TABLES[server][tool["name"]]
    untrusted = _classify(server, tool, ServerTrust.UNTRUSTED)
    trusted = _classify(server, tool, ServerTrust.TRUSTED)
    assert (untrusted.replay_policy.value, untrusted.rule) == (row.untrusted, row.untrusted_rule)
    assert (trusted.replay_policy.value, trusted.rule) == (row.trusted, row.trusted_rule)
    assert untrusted.reason and trusted.reason


@pytest.mark.parametrize("trust", TRUSTS)
def test_no_write_tool_of_any_catalogue_is_auto(trust: ServerTrust) -> None:
    auto = [
        f"{server}/{tool['name']}"
        for server, tool in TOOLS
        if TABLES[server][tool["name"]].effect == WRITE
        and _classify(server, tool, trust).replay_policy is ReplayPolicy.AUTO
    ]
    assert auto == []


@pytest.mark.parametrize("trust", TRUSTS)
def test_code_carrying_tools_writing_per_call_are_never_auto(trust: ServerTrust) -> None:
    carrying = [(s, t) for s, t in TOOLS if deciding_argument(t) is not None]
    sql = [(s, t) for s, t in carrying if deciding_argument(t).kind is PerCall.SQL]  # type: ignore[union-attr]
    assert {t["name"] for _, t in sql} >= {"query", "read_query", "write_query", "create_table"}
    for server, tool in sql:
        stored = _classify(server, tool, trust)
        assert stored.replay_policy is ReplayPolicy.NEVER
        for statement in (
            "COMMIT; DROP SCHEMA public CASCADE",
            "DELETE FROM t",
            "CREATE TABLE x (a int)",
        ):
            assert _call(tool, stored, statement).replay_policy is ReplayPolicy.NEVER


def test_at_least_nine_in_ten_read_tools_are_auto_untrusted() -> None:
    not_auto = set()
    reads = 0
    for server, tool in TOOLS:
        if TABLES[server][tool["name"]].effect != READ:
            continue
        reads += 1
        stored = _classify(server, tool, ServerTrust.UNTRUSTED)
        if deciding_argument(tool) is not None:
            stored = _call(tool, stored, "SELECT * FROM t WHERE a = 1")
        if stored.replay_policy is not ReplayPolicy.AUTO:
            not_auto.add((server, tool["name"]))
    assert not_auto == set(READS_NOT_AUTO_UNTRUSTED)
    assert (reads - len(not_auto)) / reads >= 0.9, (reads, sorted(not_auto))


def test_trusted_read_only_annotations_resolve_ambiguous_reads() -> None:
    by_name = {t["name"]: t for t in CATALOGUES["mcp_server_git"]}
    assert _classify("mcp_server_git", by_name["git_log"], ServerTrust.TRUSTED).replay_policy is (
        ReplayPolicy.AUTO
    )
