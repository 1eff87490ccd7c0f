"""MCP tools are re-classified; untrusted claims only ever make a tool more conservative."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ledger.classification.mcp import classify_mcp_tool
from ledger.classification.words import AMBIGUOUS_VERBS, DESTRUCTIVE_VERBS, EFFECT_VERBS
from ledger.domain import Idempotency, ReplayPolicy, ServerTrust

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
def test_untrusted_annotations_never_lower_the_classification(
    name: str, hints: dict[str, bool], description: str
) -> None:
    unannotated = classify_mcp_tool(_tool(name, description), trust=UNTRUSTED)
    claimed = classify_mcp_tool(_tool(name, description, **hints), trust=UNTRUSTED)
    assert claimed.idempotency.rank >= unannotated.idempotency.rank
    assert claimed.destructive or not unannotated.destructive


@given(name=_names, description=_descriptions)
def test_an_untrusted_description_never_lowers_what_the_name_says(
    name: str, description: str
) -> None:
    """It may establish a read only for a name none of whose words the classifier knows."""
    bare = classify_mcp_tool(_tool(name), trust=UNTRUSTED)
    described = classify_mcp_tool(_tool(name, description), trust=UNTRUSTED)
    if bare.rule != "mcp.name.unknown":
        assert described.idempotency.rank >= bare.idempotency.rank
        assert described.destructive or not bare.destructive


# The verbs the issue names, and every verb of the classifier's write vocabularies.
LISTED_WRITE_VERBS = sorted(
    {
        *[
            "log",
            "resolve",
            "check",
            "load",
            "poll",
            "ping",
            "download",
            "print",
            "sync",
            "process",
            "handle",
            "mark",
        ],
        *[
            "send",
            "email",
            "post",
            "charge",
            "create",
            "delete",
            "overwrite",
            "update",
            "notify",
            "publish",
            "pay",
        ],
        *["refund", "deploy"],
    }
    | DESTRUCTIVE_VERBS
    | EFFECT_VERBS
    | AMBIGUOUS_VERBS
)


@pytest.mark.parametrize(
    ("name", "description"),
    [
        ("log_work", "Log time spent on an issue."),
        ("resolve_incident", "Resolve the incident in the on-call tool."),
        ("download_file", "Download a file to the local disk."),
        ("check_in_guest", "Check a guest in at the front desk."),
        ("sync_contacts", "Sync contacts from the CRM."),
        ("mark_read", "Mark a message as read."),
        ("process_refund", "Process a refund for an order."),
        ("get_weekly_report", "Generate the weekly report and email it to the team."),
        ("weekly_digest", "Builds the digest, then sends it to every subscriber."),
        ("lookup_customer", "Looks up the customer and charges the card on file."),
        ("fetch_invoice", "Fetch the invoice. Overwrites the cached copy."),
    ],
)
def test_families_that_looked_like_reads_are_never_auto(name: str, description: str) -> None:
    result = classify_mcp_tool(_tool(name, description), trust=UNTRUSTED)
    assert result.replay_policy is not ReplayPolicy.AUTO, result.reason


def test_an_unknown_word_is_a_read_only_when_the_description_establishes_one() -> None:
    bare = classify_mcp_tool(_tool("directory_tree"), trust=UNTRUSTED)
    described = classify_mcp_tool(
        _tool("directory_tree", "Get a recursive tree view of files."), trust=UNTRUSTED
    )
    unclear = classify_mcp_tool(
        _tool("directory_tree", "Frobnicates the tree and returns it."), trust=UNTRUSTED
    )
    assert bare.replay_policy is ReplayPolicy.NEVER and bare.rule == "mcp.name.unknown"
    assert described.replay_policy is ReplayPolicy.AUTO
    assert unclear.replay_policy is ReplayPolicy.NEVER


def test_a_read_verb_with_unknown_words_needs_the_description_too() -> None:
    assert classify_mcp_tool(_tool("get_frobnication"), trust=UNTRUSTED).replay_policy is (
        ReplayPolicy.NEVER
    )
    assert classify_mcp_tool(_tool("get_status"), trust=UNTRUSTED).replay_policy is (
        ReplayPolicy.AUTO
    )


def test_a_noun_after_a_read_verb_is_its_object_and_before_it_the_verb() -> None:
    assert (
        classify_mcp_tool(
            _tool("get_pull_request_comments", "Get the review comments."), trust=UNTRUSTED
        ).replay_policy
        is ReplayPolicy.AUTO
    )
    assert (
        classify_mcp_tool(
            _tool("comment_on_issue", "Gets the issue."), trust=UNTRUSTED
        ).replay_policy
        is ReplayPolicy.NEVER
    )


def test_a_shared_prefix_is_a_namespace_unless_it_is_a_verb() -> None:
    plain = _tool("maps_geocode", "Convert an address into coordinates.")
    assert classify_mcp_tool(plain, trust=UNTRUSTED, namespace="maps").replay_policy is (
        ReplayPolicy.AUTO
    )
    assert classify_mcp_tool(plain, trust=UNTRUSTED).replay_policy is ReplayPolicy.NEVER


def test_a_trusted_sql_tool_is_classified_per_call_whatever_its_annotations() -> None:
    query = _tool("query", "Run a read-only SQL query", readOnlyHint=True, destructiveHint=False)
    query["inputSchema"] = {"type": "object", "properties": {"sql": {"type": "string"}}}
    result = classify_mcp_tool(query, trust=TRUSTED)
    assert result.replay_policy is ReplayPolicy.NEVER
    assert result.rule == "mcp.per_call.sql"


def test_trusted_mkdir_semantics_make_create_directory_idempotent() -> None:
    mkdir = _tool(
        "create_directory",
        "Create a new directory. If the directory already exists, this succeeds silently.",
    )
    assert classify_mcp_tool(mkdir, trust=TRUSTED).replay_policy is ReplayPolicy.AUTO
    untrusted = classify_mcp_tool(mkdir, trust=UNTRUSTED)
    assert untrusted.replay_policy is ReplayPolicy.NEVER
    assert "trusted" in untrusted.reason


def _cased(word: str, casing: str) -> str:
    return {"lower": word, "upper": word.upper(), "title": word.title()}[casing]


_word = st.sampled_from(["user", "report", "file", "status", "get", "list", "page", "data"])
_casing = st.sampled_from(["lower", "upper", "title"])


@st.composite
def _names_with_a_write_verb(draw: st.DrawFn) -> str:
    verb = draw(st.sampled_from(LISTED_WRITE_VERBS))
    words = draw(st.lists(_word, max_size=3))
    words.insert(draw(st.integers(0, len(words))), verb)
    separator = draw(st.sampled_from(["_", "-", ".", " ", "camel"]))
    if separator == "camel":
        return words[0].lower() + "".join(w.title() for w in words[1:])
    return separator.join(_cased(w, draw(_casing)) for w in words)


@given(
    name=_names_with_a_write_verb(),
    description=st.one_of(st.text(max_size=80), _descriptions),
    hints=_hints,
)
def test_a_name_with_a_write_verb_is_never_auto_from_an_untrusted_server(
    name: str, description: str, hints: dict[str, bool]
) -> None:
    result = classify_mcp_tool(_tool(name, description, **hints), trust=UNTRUSTED)
    assert result.replay_policy is not ReplayPolicy.AUTO, (name, result.reason)


def test_a_second_verb_after_and_is_a_verb_not_an_object() -> None:
    assert (
        classify_mcp_tool(
            _tool("get_build_status", "Get the status of a build."), trust=UNTRUSTED
        ).replay_policy
        is ReplayPolicy.AUTO
    )
    assert (
        classify_mcp_tool(
            _tool("get_and_lock", "Get a row and lock it."), trust=UNTRUSTED
        ).replay_policy
        is ReplayPolicy.NEVER
    )


@pytest.mark.parametrize(
    ("name", "description"),
    [
        ("get_report", "Get the report, then save it to Drive."),
        ("get_user_and_ban", ""),
        ("list_and_block", ""),
        ("search_and_bookmark", ""),
        ("get_tweet_and_retweet", ""),
        ("lookup_then_bill", ""),
        ("read_and_react", ""),
        ("view_and_tick", ""),
        ("list_and_like", ""),
        ("fetch_and_embed", "Fetch a page."),
        ("get_report", "Get the report and print it on the office printer."),
        ("get_report", "Get the report and message the team."),
        ("get_report", "Get the report and mail it."),
        ("get_report", "Get the report and share it."),
        ("get_report", "Get the report and tweet it."),
        ("get_report", "Get the report and page the on-call engineer."),
        ("get_report", "Get the report and alert the team."),
        ("get_status", "Get the status. Also reboots the server."),
        ("get_next_ticket", "Get the next ticket and claim it."),
    ],
)
def test_a_later_verb_in_a_name_or_description_is_never_auto(name: str, description: str) -> None:
    result = classify_mcp_tool(_tool(name, description), trust=UNTRUSTED)
    assert result.replay_policy is not ReplayPolicy.AUTO, result.reason


def test_a_known_participle_describes_the_object() -> None:
    tool = _tool("list_allowed_directories", "List the directories this server may use.")
    assert classify_mcp_tool(tool, trust=UNTRUSTED).replay_policy is ReplayPolicy.AUTO


@pytest.mark.parametrize(
    ("name", "description"),
    [
        ("pop_item", "Get the next item."),
        ("dequeue", "Get the next job."),
        ("consume_events", "Read events from the stream."),
        ("read_messages", "Read messages from the queue; they are consumed."),
        ("receive_message", "Get a message from the queue."),
        ("show_notification", "Show a notification on the desktop."),
        ("display_alert", "Display an alert to the user."),
    ],
)
def test_queue_consumers_and_displays_are_never_auto(name: str, description: str) -> None:
    result = classify_mcp_tool(_tool(name, description), trust=UNTRUSTED)
    assert result.replay_policy is ReplayPolicy.NEVER, result.reason
