"""The reads of the MCP reference servers, as the ledger knows them.

A server names its implementation when it answers ``initialize`` (``serverInfo.name``). For the
reference servers the ledger knows which tools only read, so a read such as mcp-server-git's
``git_log`` or the memory server's ``open_nodes`` (whose words also write: ``log``, ``open``)
runs again each time it is asked, whatever the server's trust: its annotations are not needed
to believe it.

A tool matches only by its name on a server of that name, and only while every argument it
takes is one the catalogue knows for it: a server of the same name offering a tool of the same
name with other arguments (another version, another program) is read by its words and
annotations as any other tool. What the catalogue believes of a server is its name; a server
that lies about its name can do any side effect on any call anyway, with or without a retry.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django.utils.translation import gettext_noop

from ledger.classification import Classification
from ledger.domain import Idempotency
from ledger.stored_text import StoredText

#: By ``serverInfo.name``: each read tool and every argument it may take.
KNOWN_READS: dict[str, dict[str, frozenset[str]]] = {
    # @modelcontextprotocol/server-filesystem
    "secure-filesystem-server": {
        "read_file": frozenset({"path", "head", "tail"}),
        "read_text_file": frozenset({"path", "head", "tail"}),
        "read_media_file": frozenset({"path"}),
        "read_multiple_files": frozenset({"paths"}),
        "list_directory": frozenset({"path"}),
        "list_directory_with_sizes": frozenset({"path", "sortBy"}),
        "directory_tree": frozenset({"path", "excludePatterns"}),
        "search_files": frozenset({"path", "pattern", "excludePatterns"}),
        "get_file_info": frozenset({"path"}),
        "list_allowed_directories": frozenset(),
    },
    # @modelcontextprotocol/server-memory
    "memory-server": {
        "read_graph": frozenset(),
        "search_nodes": frozenset({"query"}),
        "open_nodes": frozenset({"names"}),
    },
    # mcp-server-git
    "mcp-git": {
        "git_status": frozenset({"repo_path"}),
        "git_diff_unstaged": frozenset({"repo_path", "context_lines"}),
        "git_diff_staged": frozenset({"repo_path", "context_lines"}),
        "git_diff": frozenset({"repo_path", "target", "context_lines"}),
        "git_log": frozenset({"repo_path", "max_count", "start_timestamp", "end_timestamp"}),
        "git_show": frozenset({"repo_path", "revision"}),
        "git_branch": frozenset({"repo_path", "branch_type", "contains", "not_contains"}),
    },
    # mcp-server-sqlite (``read_query`` is classified per call from its SQL)
    "sqlite": {
        "list_tables": frozenset(),
        "describe_table": frozenset({"table_name"}),
    },
}

_KNOWN_READ = StoredText(
    gettext_noop("A read of the reference server %(server)s, as the ledger's catalogue knows it.")
)


def known_read(implementation: str, descriptor: Mapping[str, Any]) -> Classification | None:
    """The catalogue's classification of the tool ``descriptor`` of a server that names
    itself ``implementation``, or None when the catalogue does not know it."""
    arguments = KNOWN_READS.get(implementation, {}).get(str(descriptor.get("name")))
    if arguments is None:
        return None
    schema = descriptor.get("inputSchema")
    properties = schema.get("properties") if isinstance(schema, Mapping) else None
    taken = set(properties) if isinstance(properties, Mapping) else set()
    if not taken <= arguments:
        return None
    return Classification.of(
        Idempotency.IDEMPOTENT,
        reason=_KNOWN_READ(server=implementation),
        rule="mcp.known_server.read",
    )
