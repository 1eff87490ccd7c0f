"""Key fields: the business object derived from declared argument paths."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ledger.keys import (
    MAX_READABLE_OBJECT,
    KeyBuildError,
    business_object_from,
    key_field_outside_schema,
    validate_key_fields,
)


@pytest.mark.parametrize(
    ("fields", "tool_input", "expected"),
    [
        (["cart"], {"cart": "c-9", "note": "x"}, "cart=c-9"),
        (["cart.id"], {"cart": {"id": "c-9", "items": [1]}}, "cart.id=c-9"),
        (["items.0.sku"], {"items": [{"sku": "A"}, {"sku": "B"}]}, "items.0.sku=A"),
        (["user", "amount"], {"amount": 5, "user": "u"}, "user=u,amount=5"),
        (["cart"], {"cart": {"b": 2, "a": 1}}, 'cart={"a":1,"b":2}'),
        ([], {"cart": "c-9"}, None),
    ],
)
def test_the_business_object_names_the_key_fields_values(
    fields: list[str], tool_input: dict, expected: str | None
) -> None:
    assert business_object_from(fields, tool_input) == expected


@pytest.mark.parametrize(
    ("fields", "tool_input"),
    [
        (["cart"], {}),
        (["cart"], {"cart": None}),
        (["cart"], {"cart": ""}),
        (["cart"], {"cart": []}),
        (["cart.id"], {"cart": {"other": 1}}),
        (["items.2"], {"items": [1, 2]}),
    ],
)
def test_a_missing_or_empty_key_field_is_refused(fields: list[str], tool_input: dict) -> None:
    with pytest.raises(KeyBuildError):
        business_object_from(fields, tool_input)


def test_a_long_or_unprintable_value_is_hashed() -> None:
    long = business_object_from(["text"], {"text": "x" * (MAX_READABLE_OBJECT + 1)})
    control = business_object_from(["text"], {"text": "a\nb"})
    assert long is not None and long.startswith("sha256=") and len(long) == 47
    assert control is not None and control.startswith("sha256=")


@given(
    st.dictionaries(st.text(min_size=1, max_size=5), st.text(max_size=20) | st.integers()),
    st.text(min_size=1, max_size=300),
)
def test_other_arguments_never_change_the_business_object(extra: dict, cart: str) -> None:
    alone = business_object_from(["cart"], {"cart": cart})
    assert business_object_from(["cart"], {**extra, "cart": cart}) == alone


@given(st.text(min_size=1, max_size=50), st.text(min_size=1, max_size=50))
def test_different_values_give_different_business_objects(first: str, second: str) -> None:
    if first != second:
        assert business_object_from(["cart"], {"cart": first}) != business_object_from(
            ["cart"], {"cart": second}
        )


@pytest.mark.parametrize(
    "fields", [["a..b"], [".a"], ["a b"], ["$.a"], [""], [f"f{i}" for i in range(11)]]
)
def test_malformed_key_fields_are_refused(fields: list[str]) -> None:
    with pytest.raises(KeyBuildError):
        validate_key_fields(fields)


def test_a_key_field_named_twice_counts_once() -> None:
    assert validate_key_fields(["cart", "user", "cart"]) == ["cart", "user"]


ISSUE_SCHEMA = {
    "type": "object",
    "properties": {
        "repo": {"type": "string"},
        "issue": {"type": "object", "properties": {"title": {"type": "string"}}},
        "labels": {"type": "array", "items": {"type": "object", "properties": {"n": {}}}},
        "extra": {"type": "object"},
    },
}


@pytest.mark.parametrize(
    ("fields", "schema", "outside"),
    [
        (["repo", "issue.title"], ISSUE_SCHEMA, None),
        (["labels.0.n", "extra.anything.below"], ISSUE_SCHEMA, None),
        (["repo", "titel"], ISSUE_SCHEMA, "titel"),
        (["issue.body"], ISSUE_SCHEMA, "issue.body"),
        (["labels.first"], ISSUE_SCHEMA, "labels.first"),
        (["labels.0.m"], ISSUE_SCHEMA, "labels.0.m"),
        (["titel"], {**ISSUE_SCHEMA, "additionalProperties": True}, None),
        (["titel"], {**ISSUE_SCHEMA, "additionalProperties": {"type": "string"}}, None),
        (["anything"], {"type": "object"}, None),
        (["anything"], None, None),
    ],
)
def test_a_key_field_outside_the_input_schema_is_named(
    fields: list[str], schema: Any, outside: str | None
) -> None:
    assert key_field_outside_schema(fields, schema) == outside
