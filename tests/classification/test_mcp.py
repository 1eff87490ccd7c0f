"""MCP tools are re-classified; untrusted claims only ever make a tool more conservative."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ledger.classification.mcp import classify_mcp_tool
from ledger.domain import Idempotency, ReplayPolicy, ServerTrust

FIXTURES = Path(__file__).parent.parent / "fixtures" / "mcp"
GIT_TOOLS = json.loads((FIXTURES / "mcp_server_git_tools_list.json").read_text())["tools"]
WRITING_GIT_TOOLS = {"git_commit", "git_add", "git_reset", "git_create_branch", "git_checkout"}
UNTRUSTED, TRUSTED = ServerTrust.UNTRUSTED, ServerTrust.TRUSTED


def _tool(name: str, description: str = "", **annotations: Any) -> dict[str, Any]:
    tool: dict[str, Any] = {"name": name, "description": description, "inputSchema": {}}
    if annotations:
        tool["annotations"] = annotations
    return tool


def test_seed_create_issue_is_non_idempotent_by_default() -> None:
    result = classify_mcp_tool(_tool("create_issue", "Create an issue"), trust=UNTRUSTED)
    assert (result.idempotency, result.replay_policy) == (
        Idempotency.NON_IDEMPOTENT,
        ReplayPolicy.NEVER,
    )


def test_write_verbs_are_checked_before_read_verbs() -> None:
    result = classify_mcp_tool(_tool("get_and_delete"), trust=UNTRUSTED)
    assert result.idempotency is Idempotency.NON_IDEMPOTENT
    assert result.destructive


def test_a_tool_without_a_known_verb_is_non_idempotent() -> None:
    assert classify_mcp_tool(_tool("frobnicate"), trust=UNTRUSTED).replay_policy is (
        ReplayPolicy.NEVER
    )


@pytest.mark.parametrize("tool", GIT_TOOLS, ids=lambda t: t["name"])
def test_real_git_server_untrusted_never_auto_for_writes(tool: dict[str, Any]) -> None:
    result = classify_mcp_tool(tool, trust=UNTRUSTED)
    if tool["name"] in WRITING_GIT_TOOLS:
        assert result.replay_policy is ReplayPolicy.NEVER
    assert result.reason


def test_real_git_server_read_tools_replay_automatically() -> None:
    by_name = {t["name"]: classify_mcp_tool(t, trust=UNTRUSTED) for t in GIT_TOOLS}
    for name in ("git_status", "git_log", "git_diff", "git_show"):
        assert by_name[name].replay_policy is ReplayPolicy.AUTO, name


def test_untrusted_read_only_hint_does_not_make_a_writer_safe() -> None:
    lying = _tool(
        "delete_repository",
        "Reads the repository safely.",
        readOnlyHint=True,
        destructiveHint=False,
        idempotentHint=True,
    )
    result = classify_mcp_tool(lying, trust=UNTRUSTED)
    assert result.replay_policy is ReplayPolicy.NEVER
    assert result.destructive


def test_untrusted_annotations_can_make_a_reader_more_conservative() -> None:
    result = classify_mcp_tool(_tool("get_report", readOnlyHint=False), trust=UNTRUSTED)
    assert result.idempotency is Idempotency.NON_IDEMPOTENT
    assert result.destructive  # destructiveHint defaults to true


def test_untrusted_description_can_make_a_reader_more_conservative() -> None:
    result = classify_mcp_tool(
        _tool("get_ticket", "Gets a ticket. Deletes it after reading."), trust=UNTRUSTED
    )
    assert result.destructive
    assert result.replay_policy is ReplayPolicy.NEVER


def test_trusted_read_only_hint_is_believed() -> None:
    result = classify_mcp_tool(_tool("branches", readOnlyHint=True), trust=TRUSTED)
    assert result.replay_policy is ReplayPolicy.AUTO


def test_trusted_annotations_cannot_clear_a_destructive_name() -> None:
    result = classify_mcp_tool(_tool("drop_table", readOnlyHint=True), trust=TRUSTED)
    assert result.replay_policy is ReplayPolicy.NEVER
    assert result.destructive


def test_trusted_read_only_hint_contradicting_a_write_name_is_not_believed() -> None:
    result = classify_mcp_tool(_tool("create_invoice", readOnlyHint=True), trust=TRUSTED)
    assert result.replay_policy is ReplayPolicy.NEVER


def test_trusted_idempotent_write_is_conditional() -> None:
    tool = _tool("put_setting", readOnlyHint=False, destructiveHint=False, idempotentHint=True)
    assert classify_mcp_tool(tool, trust=TRUSTED).idempotency is Idempotency.CONDITIONAL


@pytest.mark.parametrize(
    "bad",
    [
        {},
        {"name": ""},
        {"name": 3},
        "x",
        {"name": "a", "annotations": []},
        {"name": "a", "description": 5},
    ],
)
def test_malformed_descriptors_are_rejected(bad: Any) -> None:
    with pytest.raises(ValueError):
        classify_mcp_tool(bad, trust=UNTRUSTED)


_names = st.from_regex(r"[a-z]{2,8}(_[a-z]{2,8}){0,2}", fullmatch=True)
_hints = st.fixed_dictionaries(
    {},
    optional={
        "readOnlyHint": st.booleans(),
        "destructiveHint": st.booleans(),
        "idempotentHint": st.booleans(),
        "openWorldHint": st.booleans(),
    },
)
_descriptions = st.sampled_from(
    [
        "",
        "Reads things.",
        "Deletes everything.",
        "Safe and read only",
        "Creates a record",
        "Lists items",
    ]
)


@given(name=_names, hints=_hints, description=_descriptions)
def test_untrusted_claims_never_lower_the_name_based_classification(
    name: str, hints: dict[str, bool], description: str
) -> None:
    bare = classify_mcp_tool(_tool(name), trust=UNTRUSTED)
    claimed = classify_mcp_tool(_tool(name, description, **hints), trust=UNTRUSTED)
    assert claimed.idempotency.rank >= bare.idempotency.rank
    assert claimed.destructive or not bare.destructive
