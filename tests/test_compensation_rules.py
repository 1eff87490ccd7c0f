"""The pure rules of a compensation: its key, its arguments, its URL (ledger.compensation)."""

from __future__ import annotations

import re
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ledger.compensation import (
    KEY_SUFFIX,
    CompensationError,
    compensation_arguments,
    compensation_key,
    compensation_state,
    fill_url,
    shown_state,
    url_arguments,
    validate_arguments,
)
from ledger.keys import MAX_KEY_LENGTH


def test_the_key_is_the_original_key_with_the_suffix() -> None:
    assert compensation_key("agent:acme:u1:run-1:create_order:cart-1") == (
        "agent:acme:u1:run-1:create_order:cart-1:compensate"
    )


def test_a_key_too_long_for_a_suffix_is_refused() -> None:
    with pytest.raises(CompensationError, match="longer than"):
        compensation_key("k" * (MAX_KEY_LENGTH - len(KEY_SUFFIX) + 1))


@given(st.text(min_size=1, max_size=MAX_KEY_LENGTH - len(KEY_SUFFIX)))
def test_distinct_originals_have_distinct_compensation_keys(key: str) -> None:
    assert compensation_key(key) != compensation_key(key + "x")
    assert compensation_key(key).removesuffix(KEY_SUFFIX) == key


@pytest.mark.parametrize(
    "arguments",
    [
        {"order_id": "result.id"},
        {"charge": "result.id", "amount": "input.amount.value", "first": "result.items.0"},
    ],
)
def test_valid_argument_mappings(arguments: dict[str, str]) -> None:
    assert validate_arguments(arguments) == arguments


@pytest.mark.parametrize(
    ("arguments", "problem"),
    [
        ({}, "at least one"),
        ([], "at least one"),
        ({"order_id": "id"}, "must be a path"),
        ({"order_id": "output.id"}, "must be a path"),
        ({"order_id": "result"}, "must be a path"),
        ({"order_id": "result..id"}, "must be a path"),
        ({"order_id": 7}, "must be a path"),
        ({"1st": "result.id"}, "not an identifier"),
        ({"a b": "result.id"}, "not an identifier"),
        ({f"a{n}": "result.id" for n in range(21)}, "at most"),
    ],
)
def test_invalid_argument_mappings(arguments: Any, problem: str) -> None:
    with pytest.raises(CompensationError, match=problem):
        validate_arguments(arguments)


@pytest.mark.parametrize(
    ("mapping", "tool_input", "result", "expected"),
    [
        ({"order_id": "result.id"}, {}, {"id": "ord_1"}, {"order_id": "ord_1"}),
        ({"cart": "input.cart.id"}, {"cart": {"id": "c-9"}}, None, {"cart": "c-9"}),
        ({"line": "result.lines.1"}, {}, {"lines": ["a", "b"]}, {"line": "b"}),
        # A call settled by a look-up records the downstream object it found as evidence.
        (
            {"order_id": "result.id"},
            {},
            {"evidence": {"id": "ord_2"}, "reconciled": "found"},
            {"order_id": "ord_2"},
        ),
        ({"amount": "result.amount"}, {}, {"amount": 0}, {"amount": 0}),
    ],
)
def test_arguments_come_from_the_original_input_and_result(
    mapping: dict[str, str], tool_input: Any, result: Any, expected: dict[str, Any]
) -> None:
    assert compensation_arguments(mapping, tool_input=tool_input, result=result) == expected


@pytest.mark.parametrize(
    ("mapping", "result"),
    [
        ({"order_id": "result.id"}, None),
        ({"order_id": "result.id"}, {"name": "x"}),
        ({"order_id": "result.id"}, {"id": ""}),
        ({"order_id": "result.id.deeper"}, {"id": "ord_1"}),
        ({"line": "result.lines.5"}, {"lines": ["a"]}),
    ],
)
def test_a_missing_argument_is_an_error_never_a_guess(mapping: dict[str, str], result: Any) -> None:
    with pytest.raises(CompensationError, match="missing"):
        compensation_arguments(mapping, tool_input={}, result=result)


def test_the_url_takes_each_argument_quoted() -> None:
    url = fill_url("https://shop.example/orders/{order_id}/cancel", {"order_id": "a/../b?x=1"})
    assert url == "https://shop.example/orders/a%2F..%2Fb%3Fx%3D1/cancel"


def test_a_url_needing_an_argument_that_is_not_there_is_refused() -> None:
    with pytest.raises(CompensationError, match="order_id"):
        fill_url("https://shop.example/orders/{order_id}/cancel", {"charge": "c"})


@pytest.mark.parametrize("value", [".", ".."])
def test_an_argument_that_a_url_would_resolve_away_is_refused(value: str) -> None:
    with pytest.raises(CompensationError, match="path segment"):
        fill_url("https://shop.example/orders/{id}/cancel", {"id": value})


@given(st.text(min_size=1, max_size=50).filter(lambda v: v not in (".", "..")))
def test_no_argument_can_leave_its_path_segment(value: str) -> None:
    url = fill_url("https://shop.example/orders/{id}/cancel", {"id": value})
    middle = url.removeprefix("https://shop.example/orders/").removesuffix("/cancel")
    assert "/" not in middle and "?" not in middle and "#" not in middle


@pytest.mark.parametrize(
    ("record_state", "shown"),
    [
        ("succeeded", "compensated"),
        ("reserved", "reserved"),
        ("executing", "executing"),
        ("unknown", "unknown"),
        ("failed_final", "failed_final"),
        (None, "missing"),
    ],
)
def test_a_compensation_is_shown_by_its_own_record_state_and_compensated_once_it_succeeded(
    record_state: str | None, shown: str
) -> None:
    assert compensation_state(record_state) == shown


@pytest.mark.parametrize(
    ("record_state", "approval_state", "shown"),
    [
        ("reserved", "pending", "awaiting_approval"),
        ("reserved", "approved", "approved_to_run"),
        ("reserved", "consumed", "approved_to_run"),
        ("reserved", "rejected", "rejected"),
        ("reserved", "expired", "expired"),
        ("reserved", "invalidated", "invalidated"),
        ("reserved", None, "awaiting_approval"),
        ("executing", "consumed", "executing"),
        ("unknown", "consumed", "unknown"),
        ("succeeded", "consumed", "compensated"),
        ("failed_final", "consumed", "failed_final"),
        ("failed_final", "pending", "awaiting_approval"),  # asked again after it did not run
        ("failed_final", "approved", "approved_to_run"),
        (None, None, "missing"),
    ],
)
def test_the_console_shows_a_compensation_by_its_record_and_its_approval(
    record_state: str | None, approval_state: str | None, shown: str
) -> None:
    """Never the record's ``reserved`` and never ``compensated`` before a human approved it."""
    assert shown_state(record_state, approval_state) == shown


def test_the_url_names_the_arguments_it_takes() -> None:
    assert url_arguments("https://x/{order_id}/lines/{line}?k={key}") == {"order_id", "line", "key"}
    assert url_arguments("https://x/orders") == set()


@pytest.mark.parametrize(
    ("stored_input", "stored_result", "path"),
    [
        ({"token": "[REDACTED]"}, {"id": "o-1"}, "input.token"),
        ({"to": "[REDACTED:email]"}, {"id": "o-1"}, "input.to"),
        ({"cart": "c"}, {"id": "o-1", "note": "x…[truncated 10 chars]"}, "result.note"),
        ({"cart": "c"}, {"id": "o-1", "card": {"pan": "[REDACTED]"}}, "result.card"),
        ({"redacted": "restricted", "sha256": "0" * 64}, {"id": "o-1"}, "input.cart"),
        ({"cart": "c"}, {"redacted": "restricted", "sha256": "0" * 64}, "result.id"),
    ],
)
def test_an_argument_the_ledger_redacted_when_it_stored_the_call_is_refused(
    stored_input: Any, stored_result: Any, path: str
) -> None:
    with pytest.raises(CompensationError, match=re.escape(path)):
        compensation_arguments({"arg": path}, tool_input=stored_input, result=stored_result)


def test_arguments_the_ledger_kept_as_they_are_are_taken() -> None:
    built = compensation_arguments(
        {"order_id": "result.id", "cart": "input.cart"},
        tool_input={"cart": "c-1", "token": "[REDACTED]"},
        result={"id": "o-1", "email": "[REDACTED:email]"},
    )
    assert built == {"order_id": "o-1", "cart": "c-1"}
