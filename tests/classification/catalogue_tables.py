"""The reviewed classification of every tool of the captured real catalogues (tests/fixtures/mcp/).

One row per tool: whether it writes (read by a person from the tool's documentation and
behaviour, not from the classifier), then the replay policy and rule the classifier gives it
registered untrusted and registered trusted. scripts/capture_mcp_catalogues.py re-captures
the catalogues; a tool it brings that has no row here fails test_catalogues.py until it is
reviewed. Code-carrying tools (``query``, ``read_query``...) show their stored fallback: each
call is classified from its SQL.
"""

from __future__ import annotations

from typing import NamedTuple

READ, WRITE, IDEMPOTENT_WRITE = "read", "write", "idempotent write"  # a repeat changes nothing


class Row(NamedTuple):
    effect: str
    untrusted: str
    untrusted_rule: str
    trusted: str
    trusted_rule: str


TABLES: dict[str, dict[str, Row]] = {
    "mcp_server_fetch": {
        "fetch": Row(READ, "auto", "mcp.name.read", "auto", "mcp.annotations.trusted.read_only"),
    },
    "mcp_server_git": {
        "git_status": Row(
            READ, "auto", "mcp.name.read", "auto", "mcp.annotations.trusted.read_only"
        ),
        "git_diff_unstaged": Row(
            READ, "auto", "mcp.name.read", "auto", "mcp.annotations.trusted.read_only"
        ),
        "git_diff_staged": Row(
            READ, "auto", "mcp.name.read", "auto", "mcp.annotations.trusted.read_only"
        ),
        "git_diff": Row(READ, "auto", "mcp.name.read", "auto", "mcp.annotations.trusted.read_only"),
        "git_commit": Row(
            WRITE, "never", "mcp.name.object", "never", "mcp.annotations.trusted.write"
        ),
        "git_add": Row(
            WRITE, "never", "mcp.name.effect", "ask", "mcp.annotations.trusted.idempotent_write"
        ),
        "git_reset": Row(WRITE, "never", "mcp.name.destructive", "never", "mcp.name.destructive"),
        "git_log": Row(
            READ, "never", "mcp.name.ambiguous", "auto", "mcp.annotations.trusted.read_only"
        ),
        "git_create_branch": Row(
            WRITE, "never", "mcp.name.effect", "never", "mcp.annotations.trusted.write"
        ),
        "git_checkout": Row(
            WRITE, "never", "mcp.name.effect", "never", "mcp.annotations.trusted.write"
        ),
        "git_show": Row(READ, "auto", "mcp.name.read", "auto", "mcp.annotations.trusted.read_only"),
        "git_branch": Row(
            READ, "auto", "mcp.description.read", "auto", "mcp.annotations.trusted.read_only"
        ),
    },
    "mcp_server_sqlite": {
        "read_query": Row(READ, "never", "mcp.per_call.sql", "never", "mcp.per_call.sql"),
        "write_query": Row(WRITE, "never", "mcp.per_call.sql", "never", "mcp.per_call.sql"),
        "create_table": Row(WRITE, "never", "mcp.per_call.sql", "never", "mcp.per_call.sql"),
        "list_tables": Row(READ, "auto", "mcp.description.read", "auto", "mcp.description.read"),
        "describe_table": Row(READ, "auto", "mcp.description.read", "auto", "mcp.description.read"),
        "append_insight": Row(WRITE, "never", "mcp.name.effect", "never", "mcp.name.effect"),
    },
    "mcp_server_time": {
        "get_current_time": Row(
            READ, "auto", "mcp.description.read", "auto", "mcp.annotations.trusted.read_only"
        ),
        "convert_time": Row(
            READ, "never", "mcp.name.ambiguous", "auto", "mcp.annotations.trusted.read_only"
        ),
    },
    "server_brave_search": {
        "brave_web_search": Row(
            READ, "auto", "mcp.description.read", "auto", "mcp.description.read"
        ),
        "brave_local_search": Row(
            READ, "auto", "mcp.description.read", "auto", "mcp.description.read"
        ),
    },
    "server_everything": {
        "echo": Row(READ, "auto", "mcp.name.read", "auto", "mcp.annotations.trusted.read_only"),
        "get-annotated-message": Row(
            READ, "auto", "mcp.name.read", "auto", "mcp.annotations.trusted.read_only"
        ),
        "get-env": Row(
            READ, "auto", "mcp.description.read", "auto", "mcp.annotations.trusted.read_only"
        ),
        "get-resource-links": Row(
            READ, "auto", "mcp.description.read", "auto", "mcp.annotations.trusted.read_only"
        ),
        "get-resource-reference": Row(
            READ, "auto", "mcp.description.read", "auto", "mcp.annotations.trusted.read_only"
        ),
        "get-structured-content": Row(
            READ, "auto", "mcp.description.read", "auto", "mcp.annotations.trusted.read_only"
        ),
        "get-sum": Row(
            READ, "auto", "mcp.description.read", "auto", "mcp.annotations.trusted.read_only"
        ),
        "get-tiny-image": Row(
            READ, "auto", "mcp.description.read", "auto", "mcp.annotations.trusted.read_only"
        ),
        "gzip-file-as-resource": Row(
            WRITE, "never", "mcp.name.unknown", "ask", "mcp.annotations.trusted.idempotent_write"
        ),
        "toggle-simulated-logging": Row(
            WRITE, "never", "mcp.name.ambiguous", "never", "mcp.annotations.trusted.write"
        ),
        "toggle-subscriber-updates": Row(
            WRITE, "never", "mcp.annotations.untrusted", "never", "mcp.annotations.trusted.write"
        ),
        "trigger-long-running-operation": Row(
            READ, "never", "mcp.name.effect", "never", "mcp.name.effect"
        ),
        "simulate-research-query": Row(
            WRITE, "never", "mcp.name.unknown", "never", "mcp.annotations.trusted.write"
        ),
    },
    "server_filesystem": {
        "read_file": Row(
            READ, "auto", "mcp.description.read", "auto", "mcp.annotations.trusted.read_only"
        ),
        "read_text_file": Row(
            READ, "auto", "mcp.description.read", "auto", "mcp.annotations.trusted.read_only"
        ),
        "read_media_file": Row(
            READ, "auto", "mcp.description.read", "auto", "mcp.annotations.trusted.read_only"
        ),
        "read_multiple_files": Row(
            READ, "auto", "mcp.description.read", "auto", "mcp.annotations.trusted.read_only"
        ),
        "write_file": Row(
            WRITE, "never", "mcp.description.destructive", "never", "mcp.annotations.trusted.write"
        ),
        "edit_file": Row(
            WRITE, "never", "mcp.annotations.untrusted", "never", "mcp.annotations.trusted.write"
        ),
        "create_directory": Row(
            IDEMPOTENT_WRITE,
            "never",
            "mcp.name.effect",
            "auto",
            "mcp.directory_creation.idempotent",
        ),
        "list_directory": Row(
            READ, "auto", "mcp.description.read", "auto", "mcp.annotations.trusted.read_only"
        ),
        "list_directory_with_sizes": Row(
            READ, "auto", "mcp.description.read", "auto", "mcp.annotations.trusted.read_only"
        ),
        "directory_tree": Row(
            READ, "auto", "mcp.description.read", "auto", "mcp.annotations.trusted.read_only"
        ),
        "move_file": Row(
            WRITE, "never", "mcp.name.effect", "never", "mcp.annotations.trusted.write"
        ),
        "search_files": Row(
            READ, "auto", "mcp.description.read", "auto", "mcp.annotations.trusted.read_only"
        ),
        "get_file_info": Row(
            READ, "auto", "mcp.description.read", "auto", "mcp.annotations.trusted.read_only"
        ),
        "list_allowed_directories": Row(
            READ, "auto", "mcp.description.read", "auto", "mcp.annotations.trusted.read_only"
        ),
    },
    "server_github": {
        "create_or_update_file": Row(WRITE, "never", "mcp.name.effect", "never", "mcp.name.effect"),
        "search_repositories": Row(
            READ, "auto", "mcp.description.read", "auto", "mcp.description.read"
        ),
        "create_repository": Row(WRITE, "never", "mcp.name.effect", "never", "mcp.name.effect"),
        "get_file_contents": Row(
            READ, "auto", "mcp.description.read", "auto", "mcp.description.read"
        ),
        "push_files": Row(WRITE, "never", "mcp.name.effect", "never", "mcp.name.effect"),
        "create_issue": Row(WRITE, "never", "mcp.name.effect", "never", "mcp.name.effect"),
        "create_pull_request": Row(WRITE, "never", "mcp.name.effect", "never", "mcp.name.effect"),
        "fork_repository": Row(WRITE, "never", "mcp.name.effect", "never", "mcp.name.effect"),
        "create_branch": Row(WRITE, "never", "mcp.name.effect", "never", "mcp.name.effect"),
        "list_commits": Row(READ, "auto", "mcp.name.read", "auto", "mcp.name.read"),
        "list_issues": Row(READ, "auto", "mcp.description.read", "auto", "mcp.description.read"),
        "update_issue": Row(WRITE, "ask", "mcp.name.overwrite", "ask", "mcp.name.overwrite"),
        "add_issue_comment": Row(WRITE, "never", "mcp.name.effect", "never", "mcp.name.effect"),
        "search_code": Row(READ, "auto", "mcp.description.read", "auto", "mcp.description.read"),
        "search_issues": Row(READ, "auto", "mcp.description.read", "auto", "mcp.description.read"),
        "search_users": Row(READ, "auto", "mcp.description.read", "auto", "mcp.description.read"),
        "get_issue": Row(READ, "auto", "mcp.description.read", "auto", "mcp.description.read"),
        "get_pull_request": Row(
            READ, "auto", "mcp.description.read", "auto", "mcp.description.read"
        ),
        "list_pull_requests": Row(
            READ, "auto", "mcp.description.read", "auto", "mcp.description.read"
        ),
        "create_pull_request_review": Row(
            WRITE, "never", "mcp.name.effect", "never", "mcp.name.effect"
        ),
        "merge_pull_request": Row(WRITE, "never", "mcp.name.effect", "never", "mcp.name.effect"),
        "get_pull_request_files": Row(
            READ, "auto", "mcp.description.read", "auto", "mcp.description.read"
        ),
        "get_pull_request_status": Row(
            READ, "auto", "mcp.description.read", "auto", "mcp.description.read"
        ),
        "update_pull_request_branch": Row(
            WRITE, "ask", "mcp.name.overwrite", "ask", "mcp.name.overwrite"
        ),
        "get_pull_request_comments": Row(
            READ, "auto", "mcp.description.read", "auto", "mcp.description.read"
        ),
        "get_pull_request_reviews": Row(
            READ, "auto", "mcp.description.read", "auto", "mcp.description.read"
        ),
    },
    "server_gitlab": {
        "create_or_update_file": Row(WRITE, "never", "mcp.name.effect", "never", "mcp.name.effect"),
        "search_repositories": Row(
            READ, "auto", "mcp.description.read", "auto", "mcp.description.read"
        ),
        "create_repository": Row(WRITE, "never", "mcp.name.effect", "never", "mcp.name.effect"),
        "get_file_contents": Row(
            READ, "auto", "mcp.description.read", "auto", "mcp.description.read"
        ),
        "push_files": Row(WRITE, "never", "mcp.name.effect", "never", "mcp.name.effect"),
        "create_issue": Row(WRITE, "never", "mcp.name.effect", "never", "mcp.name.effect"),
        "create_merge_request": Row(WRITE, "never", "mcp.name.effect", "never", "mcp.name.effect"),
        "fork_repository": Row(WRITE, "never", "mcp.name.effect", "never", "mcp.name.effect"),
        "create_branch": Row(WRITE, "never", "mcp.name.effect", "never", "mcp.name.effect"),
    },
    "server_google_maps": {
        "maps_geocode": Row(READ, "auto", "mcp.name.read", "auto", "mcp.name.read"),
        "maps_reverse_geocode": Row(READ, "never", "mcp.name.unknown", "never", "mcp.name.unknown"),
        "maps_search_places": Row(
            READ, "auto", "mcp.description.read", "auto", "mcp.description.read"
        ),
        "maps_place_details": Row(
            READ, "auto", "mcp.description.read", "auto", "mcp.description.read"
        ),
        "maps_distance_matrix": Row(
            READ, "auto", "mcp.description.read", "auto", "mcp.description.read"
        ),
        "maps_elevation": Row(READ, "auto", "mcp.description.read", "auto", "mcp.description.read"),
        "maps_directions": Row(
            READ, "auto", "mcp.description.read", "auto", "mcp.description.read"
        ),
    },
    "server_memory": {
        "create_entities": Row(
            WRITE, "never", "mcp.name.effect", "never", "mcp.annotations.trusted.write"
        ),
        "create_relations": Row(
            WRITE, "never", "mcp.name.effect", "never", "mcp.annotations.trusted.write"
        ),
        "add_observations": Row(
            WRITE, "never", "mcp.name.effect", "never", "mcp.annotations.trusted.write"
        ),
        "delete_entities": Row(
            WRITE, "never", "mcp.name.destructive", "never", "mcp.name.destructive"
        ),
        "delete_observations": Row(
            WRITE, "never", "mcp.name.destructive", "never", "mcp.name.destructive"
        ),
        "delete_relations": Row(
            WRITE, "never", "mcp.name.destructive", "never", "mcp.name.destructive"
        ),
        "read_graph": Row(
            READ, "auto", "mcp.description.read", "auto", "mcp.annotations.trusted.read_only"
        ),
        "search_nodes": Row(
            READ, "auto", "mcp.description.read", "auto", "mcp.annotations.trusted.read_only"
        ),
        "open_nodes": Row(
            READ, "never", "mcp.name.ambiguous", "auto", "mcp.annotations.trusted.read_only"
        ),
    },
    "server_postgres": {
        "query": Row(READ, "never", "mcp.per_call.sql", "never", "mcp.per_call.sql"),
    },
    "server_redis": {
        "set": Row(WRITE, "ask", "mcp.name.overwrite", "ask", "mcp.name.overwrite"),
        "get": Row(READ, "auto", "mcp.name.read", "auto", "mcp.name.read"),
        "delete": Row(WRITE, "never", "mcp.name.destructive", "never", "mcp.name.destructive"),
        "list": Row(READ, "auto", "mcp.name.read", "auto", "mcp.name.read"),
    },
    "server_sequential_thinking": {
        "sequentialthinking": Row(
            READ, "never", "mcp.name.unknown", "auto", "mcp.annotations.trusted.read_only"
        ),
    },
    "server_slack": {
        "slack_list_channels": Row(
            READ, "auto", "mcp.description.read", "auto", "mcp.description.read"
        ),
        "slack_post_message": Row(WRITE, "never", "mcp.name.effect", "never", "mcp.name.effect"),
        "slack_reply_to_thread": Row(WRITE, "never", "mcp.name.object", "never", "mcp.name.object"),
        "slack_add_reaction": Row(WRITE, "never", "mcp.name.effect", "never", "mcp.name.effect"),
        "slack_get_channel_history": Row(
            READ, "auto", "mcp.description.read", "auto", "mcp.description.read"
        ),
        "slack_get_thread_replies": Row(
            READ, "auto", "mcp.description.read", "auto", "mcp.description.read"
        ),
        "slack_get_users": Row(
            READ, "auto", "mcp.description.read", "auto", "mcp.description.read"
        ),
        "slack_get_user_profile": Row(
            READ, "auto", "mcp.description.read", "auto", "mcp.description.read"
        ),
    },
}

# Read tools that are not ``auto`` from an untrusted server, and why (docs/classification.md).
READS_NOT_AUTO_UNTRUSTED = {
    ("mcp_server_git", "git_log"): "'log' also means to record (log_work); ambiguous verbs tighten",
    ("mcp_server_time", "convert_time"): "'convert' also writes (convert a file, a lead)",
    ("server_everything", "trigger-long-running-operation"): "'trigger' is an effect verb",
    ("server_google_maps", "maps_reverse_geocode"): "'reverse' is unknown and the description "
    "opens with 'Convert', which establishes no read",
    ("server_memory", "open_nodes"): "'open' also writes (open an issue, a pull request)",
    ("server_sequential_thinking", "sequentialthinking"): "one unknown word, and the "
    "description opens with no verb",
}
