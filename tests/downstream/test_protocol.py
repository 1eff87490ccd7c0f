"""The sans-IO protocol: key parsing, fingerprints, the replay decision and the answers."""

from __future__ import annotations

import json
import random

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from agent_ledger_downstream.protocol import (
    REDACTED,
    Problem,
    ReplayDecision,
    StoredResponse,
    check_key,
    check_scope,
    decide,
    fingerprint,
    keeps,
    lock_id,
    lookup_found,
    lookup_in_progress,
    lookup_not_found,
    parse_key,
    redact_secrets,
    stored_body,
    stored_path,
    token_matches,
)
from ledger.domain import KeyScope
from ledger.keys import KeyBuildError, build_idempotency_key

JSON = "application/json"


@pytest.mark.parametrize(
    ("header", "key"),
    [
        ("abc", "abc"),
        ("  abc  ", "abc"),
        ('"8e03978e-40d5-43e8-bc93-6894a57f9324"', "8e03978e-40d5-43e8-bc93-6894a57f9324"),
        ('"say \\"hi\\""', 'say "hi"'),
        ("agent:acme:u1:run-1:create_order:cart-1", "agent:acme:u1:run-1:create_order:cart-1"),
        ("k" * 1024, "k" * 1024),
    ],
)
def test_parse_key_accepts_tokens_and_structured_strings(header: str, key: str) -> None:
    assert parse_key(header) == key


@pytest.mark.parametrize(
    ("header", "title"),
    [
        (None, "Idempotency-Key is missing"),
        ("", "Idempotency-Key is missing"),
        ("   ", "Idempotency-Key is missing"),
        ('""', "Idempotency-Key is invalid"),
        ("k" * 1025, "Idempotency-Key is invalid"),
        ("caf\u00e9", "Idempotency-Key is invalid"),
        ("a\tb", "Idempotency-Key is invalid"),
    ],
)
def test_parse_key_refuses_with_a_400_problem(header: str | None, title: str) -> None:
    with pytest.raises(Problem) as raised:
        parse_key(header)
    assert raised.value.status == 400
    answer = raised.value.answer()
    assert answer.content_type == "application/problem+json"
    assert json.loads(answer.body) == {
        "type": "about:blank",
        "title": title,
        "status": 400,
        "detail": raised.value.detail,
    }


# What a key component may hold that the kit also accepts: printable ASCII (the ledger escapes
# ':' and '%' as %3A and %25, so a component of colons fills a key three times as fast).
printable = st.text(st.characters(min_codepoint=0x20, max_codepoint=0x7E), min_size=1, max_size=200)


@given(
    st.sampled_from(KeyScope),
    st.lists(printable, min_size=5, max_size=5),
    st.one_of(st.none(), printable),
)
def test_every_key_the_ledger_builds_from_printable_ascii_is_accepted(
    scope: KeyScope, parts: list[str], business_object: str | None
) -> None:
    tenant, user, run, tool, step = parts
    try:
        key = build_idempotency_key(
            scope=scope,
            tenant=tenant,
            user=user,
            run_id=run,
            tool=tool,
            business_object_id=business_object,
            step_id=step,
        )
    except KeyBuildError:
        return  # longer than the ledger builds
    # HTTP drops whitespace at the ends of a header's value before any service sees it.
    assume(key == key.rstrip(" "))
    assert parse_key(key) == key
    assert check_key(key) == key


def test_the_longest_key_the_ledger_builds_is_accepted() -> None:
    key = build_idempotency_key(
        scope=KeyScope.RUN,
        tenant="acme",
        user="u" * 200,
        run_id="r" * 200,
        tool=":" * 200,  # 600 characters once escaped
        step_id="s" * 5,
    )
    assert len(key) == 1024
    assert parse_key(key) == key


@pytest.mark.parametrize(
    "key", ["", "a\x00b", "a\x01b", "a\x7fb", "caf\u00e9", "k" * 1025, "line\nbreak"]
)
def test_a_key_no_request_could_have_stored_is_refused_with_a_400_problem(key: str) -> None:
    with pytest.raises(Problem) as raised:
        check_key(key)
    assert raised.value.status == 400
    assert raised.value.answer().content_type == "application/problem+json"


def test_a_scope_postgresql_cannot_hold_is_refused_with_a_400_problem() -> None:
    assert check_scope("") == "" and check_scope("client \u00e9\t7") == "client \u00e9\t7"
    with pytest.raises(Problem) as raised:
        check_scope("a\x00b")
    assert raised.value.status == 400


@pytest.mark.parametrize(
    "body",
    [b"[" * 100_000, b'{"a":' * 100_000, b"\xff\xfe{", b"1" * 5000, b'{"a": 1'],
    ids=["nested-arrays", "nested-objects", "not-utf-8", "huge-number", "truncated"],
)
def test_a_json_body_that_does_not_parse_is_fingerprinted_as_its_bytes(body: bytes) -> None:
    as_json = fingerprint(method="POST", path="/o", body=body, content_type=JSON)
    as_bytes = fingerprint(method="POST", path="/o", body=body, content_type="text/plain")
    assert as_json == as_bytes


json_objects = st.dictionaries(
    st.text(max_size=8), st.one_of(st.integers(), st.text(max_size=8), st.booleans()), max_size=6
)


@given(json_objects, st.randoms())
def test_a_json_payload_is_compared_by_content(payload: dict, rng: random.Random) -> None:
    items = list(payload.items())
    rng.shuffle(items)
    spaced = json.dumps(dict(items), indent=rng.choice([None, 2])).encode()
    compact = json.dumps(payload, separators=(",", ":")).encode()
    assert fingerprint(method="POST", path="/o", body=spaced, content_type=JSON) == fingerprint(
        method="post", path="/o", body=compact, content_type="application/json; charset=utf-8"
    )


@pytest.mark.parametrize(
    "other",
    [
        {"method": "PUT", "path": "/o", "body": b'{"a":1}', "content_type": JSON},
        {"method": "POST", "path": "/p", "body": b'{"a":1}', "content_type": JSON},
        {"method": "POST", "path": "/o?x=1", "body": b'{"a":1}', "content_type": JSON},
        {"method": "POST", "path": "/o", "body": b'{"a":2}', "content_type": JSON},
        {"method": "POST", "path": "/o", "body": b'{"a": 1}', "content_type": "text/plain"},
    ],
)
def test_method_path_and_payload_make_another_request(other: dict) -> None:
    base = fingerprint(method="POST", path="/o", body=b'{"a":1}', content_type=JSON)
    assert fingerprint(**other) != base


def test_parts_cannot_run_into_each_other() -> None:
    assert fingerprint(method="POST", path="/ab", body=b"c") != fingerprint(
        method="POST", path="/a", body=b"bc"
    )


def _stored(fp: str = "f" * 64, **changes: object) -> StoredResponse:
    fields = {
        "key": "k",
        "fingerprint": fp,
        "method": "POST",
        "path": "/o",
        "status": 201,
        "content_type": JSON,
        "body": b'{"id": 7}',
    }
    return StoredResponse(**{**fields, **changes})  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("stored", "request_fp", "decision"),
    [
        (None, "a" * 64, ReplayDecision.EXECUTE),
        (_stored("a" * 64), "a" * 64, ReplayDecision.REPLAY),
        (_stored("a" * 64), "b" * 64, ReplayDecision.MISMATCH),
    ],
)
def test_replay_decision_table(stored, request_fp: str, decision: ReplayDecision) -> None:
    assert decide(stored, request_fp) is decision


@pytest.mark.parametrize(
    ("status", "kept"),
    [(199, False), (200, True), (201, True), (299, True), (302, False), (422, False), (500, False)],
)
def test_only_2xx_responses_are_kept(status: int, kept: bool) -> None:
    assert keeps(status) is kept


@given(st.text(min_size=1, max_size=40))
def test_lock_ids_are_stable_signed_64_bit_numbers(key: str) -> None:
    assert lock_id(key) == lock_id(key)
    assert -(2**63) <= lock_id(key) < 2**63


def test_a_key_locks_apart_in_each_caller_scope() -> None:
    assert lock_id("k", "alice") != lock_id("k", "bob") != lock_id("k")
    assert lock_id("a:b", "c") != lock_id("b", "a:c")


def test_found_carries_the_stored_response() -> None:
    answer = lookup_found(_stored())
    body = json.loads(answer.body)
    assert answer.status == 200 and answer.content_type == JSON
    assert body["status"] == "found" and body["idempotency_key"] == "k"
    assert body["response"]["status"] == 201 and body["response"]["content_type"] == JSON


@pytest.mark.parametrize(
    "name", ["access_token", "client_secret", "Password", "api-key", "Authorization", "apiKey"]
)
def test_fields_named_like_secrets_are_redacted_at_any_depth(name: str) -> None:
    document = {"id": 7, "items": [{"card": {name: "s3cr3t", "last4": "4242"}}]}
    assert redact_secrets(document) == {
        "id": 7,
        "items": [{"card": {name: REDACTED, "last4": "4242"}}],
    }


def test_a_stored_json_body_passes_through_the_redact_hook() -> None:
    body = json.dumps({"id": 1, "token": "t"}).encode()
    assert json.loads(stored_body(body, JSON, redact_secrets)) == {"id": 1, "token": REDACTED}
    assert stored_body(b"token=t", "text/plain", redact_secrets) == b"token=t"
    assert stored_body(b"{not json", JSON, redact_secrets) == b"{not json"


def test_the_stored_path_drops_the_query_string() -> None:
    assert stored_path("/invoices?access_token=t&x=1") == "/invoices"
    assert stored_path("/invoices") == "/invoices"


def test_not_found_and_in_progress_answer_the_ledger_adapter_statuses() -> None:
    assert lookup_not_found("k").status == 404
    busy = lookup_in_progress("k")
    assert busy.status == 409 and busy.headers["Retry-After"] == "1"
    assert json.loads(busy.body)["state"] == "in_progress"


@pytest.mark.parametrize(
    ("authorization", "query_token", "allowed"),
    [
        ("Bearer s3cret", None, True),
        ("bearer s3cret", None, True),
        (None, "s3cret", True),
        ("Bearer wrong", "s3cret", False),
        ("Basic s3cret", None, False),
        (None, None, False),
        (None, "", False),
    ],
)
def test_token_matches(authorization: str | None, query_token: str | None, allowed: bool) -> None:
    assert token_matches("s3cret", authorization=authorization, query_token=query_token) is allowed


def test_an_empty_secret_allows_nobody() -> None:
    assert not token_matches("", authorization="Bearer ", query_token="")
