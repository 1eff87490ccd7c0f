"""Keys come from the business intent; fingerprints from canonical JSON."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ledger.domain import KeyScope
from ledger.keys import KeyBuildError, build_idempotency_key, canonical_json, fingerprint

BASE = {"tenant": "acme", "user": "u1", "run_id": "run-1", "tool": "create_order"}


def test_run_scope_key_includes_the_run() -> None:
    key = build_idempotency_key(scope=KeyScope.RUN, business_object_id="cart-9", **BASE)
    assert key == "agent:acme:u1:run-1:create_order:cart-9"


def test_business_scope_key_survives_a_new_run() -> None:
    first = build_idempotency_key(scope=KeyScope.BUSINESS, business_object_id="cart-9", **BASE)
    second = build_idempotency_key(
        scope=KeyScope.BUSINESS, business_object_id="cart-9", **{**BASE, "run_id": "run-2"}
    )
    assert first == second == "agent:acme:u1:create_order:cart-9"


def test_step_id_stands_in_for_a_missing_business_object_and_is_run_scoped() -> None:
    key = build_idempotency_key(scope=KeyScope.BUSINESS, step_id="step-3", **BASE)
    assert key == "agent:acme:u1:run-1:create_order:step=step-3"


def test_key_needs_a_business_object_or_a_step() -> None:
    with pytest.raises(KeyBuildError):
        build_idempotency_key(scope=KeyScope.RUN, **BASE)


@pytest.mark.parametrize("bad", ["", "a\nb", "x" * 201])
def test_bad_components_are_rejected(bad: str) -> None:
    with pytest.raises(KeyBuildError):
        build_idempotency_key(scope=KeyScope.RUN, business_object_id=bad or None, **BASE)


_component = st.text(
    st.characters(min_codepoint=32, max_codepoint=0x2FFF, exclude_characters="\x7f"),
    min_size=1,
    max_size=30,
)


@given(a=st.tuples(_component, _component), b=st.tuples(_component, _component))
def test_distinct_components_never_collide(a: tuple[str, str], b: tuple[str, str]) -> None:
    def key(parts: tuple[str, str]) -> str:
        return build_idempotency_key(
            scope=KeyScope.BUSINESS,
            tenant="t",
            user=parts[0],
            run_id="r",
            tool="x",
            business_object_id=parts[1],
        )

    assert (key(a) == key(b)) == (a == b)


_json = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.text(max_size=10)
    | st.floats(allow_nan=False, allow_infinity=False),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=5), children, max_size=3)
    ),
    max_leaves=10,
)


@given(_json)
def test_fingerprint_ignores_key_order(value: object) -> None:
    if isinstance(value, dict):
        reordered = dict(reversed(list(value.items())))
        assert fingerprint(value) == fingerprint(reordered)
    assert len(fingerprint(value)) == 64


def test_fingerprint_treats_integral_floats_as_integers() -> None:
    assert fingerprint({"amount": 10.0}) == fingerprint({"amount": 10})
    assert fingerprint({"amount": 10.5}) != fingerprint({"amount": 10})


def test_canonical_json_is_compact_and_sorted() -> None:
    assert canonical_json({"b": 1, "a": [1, "é"]}) == '{"a":[1,"é"],"b":1}'


def test_nan_cannot_be_fingerprinted() -> None:
    with pytest.raises(ValueError):
        fingerprint({"x": float("nan")})
