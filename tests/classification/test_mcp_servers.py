"""The reads of the MCP reference servers: known by the server's own name and the tool's
arguments, whatever the server's trust; anything else is read by its words and annotations."""

from __future__ import annotations

from typing import Any

import pytest

from ledger.classification.mcp import classify_mcp_tool
from ledger.classification.mcp_servers import KNOWN_READS
from ledger.domain import Idempotency, ServerTrust

UNTRUSTED = ServerTrust.UNTRUSTED


def _tool(name: str, arguments: list[str], **annotations: Any) -> dict[str, Any]:
    tool: dict[str, Any] = {
        "name": name,
        "description": "",
        "inputSchema": {"type": "object", "properties": {a: {} for a in arguments}},
    }
    if annotations:
        tool["annotations"] = annotations
    return tool


KNOWN = [
    (server, name, sorted(arguments))
    for server, tools in KNOWN_READS.items()
    for name, arguments in tools.items()
]


@pytest.mark.parametrize(("server", "name", "arguments"), KNOWN)
def test_a_known_read_of_a_reference_server_is_a_read_from_an_untrusted_server(
    server: str, name: str, arguments: list[str]
) -> None:
    result = classify_mcp_tool(_tool(name, arguments), trust=UNTRUSTED, implementation=server)
    assert result.idempotency is Idempotency.IDEMPOTENT
    assert result.rule == "mcp.known_server.read" and server in result.reason


@pytest.mark.parametrize(
    ("name", "words"),
    [("git_log", "log"), ("open_nodes", "open")],
)
def test_without_the_servers_name_an_ambiguous_read_stays_conservative(
    name: str, words: str
) -> None:
    server = "mcp-git" if name == "git_log" else "memory-server"
    tool = _tool(name, sorted(KNOWN_READS[server][name]))
    for implementation in ("", "my-git", "memory"):
        result = classify_mcp_tool(tool, trust=UNTRUSTED, implementation=implementation)
        assert result.idempotency is not Idempotency.IDEMPOTENT, (implementation, words)


def test_a_known_name_with_an_argument_the_catalogue_does_not_know_is_read_by_its_words() -> None:
    tool = _tool("git_log", ["repo_path", "rewrite_history"])
    result = classify_mcp_tool(tool, trust=UNTRUSTED, implementation="mcp-git")
    assert result.idempotency is not Idempotency.IDEMPOTENT


def test_a_known_reads_own_annotations_can_still_make_it_stricter() -> None:
    tool = _tool("open_nodes", ["names"], readOnlyHint=False, destructiveHint=True)
    result = classify_mcp_tool(tool, trust=UNTRUSTED, implementation="memory-server")
    assert result.idempotency is Idempotency.NON_IDEMPOTENT and result.destructive


def test_a_write_of_a_reference_server_is_not_in_the_catalogue() -> None:
    writes = {"write_file", "git_commit", "create_entities", "write_query"}
    for server, tools in KNOWN_READS.items():
        assert not writes & set(tools), server
