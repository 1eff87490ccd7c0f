"""Keys come from the business intent; fingerprints from canonical JSON."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agent_ledger_downstream.protocol import check_key
from ledger.domain import KeyScope
from ledger.keys import (
    MAX_READABLE_OBJECT,
    KeyBuildError,
    build_idempotency_key,
    business_object_from,
    canonical_json,
    fingerprint,
)

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
    st.characters(min_codepoint=32, exclude_characters="\x7f", exclude_categories=("Cs",)),
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


@pytest.mark.parametrize(
    ("parts", "expected"),
    [
        ({"user": "josé"}, "agent:acme:jos%C3%A9:run-1:create_order:cart-9"),
        ({"business_object_id": "name=Café"}, "agent:acme:u1:run-1:create_order:name=Caf%C3%A9"),
        (
            {"business_object_id": "订单 42"},
            "agent:acme:u1:run-1:create_order:%E8%AE%A2%E5%8D%95%2042",
        ),
        ({"business_object_id": " cart-9 "}, "agent:acme:u1:run-1:create_order:%20cart-9%20"),
        ({"run_id": "a:b%c"}, "agent:acme:u1:a%3Ab%25c:create_order:cart-9"),
        (
            {"step_id": "tc\u2028é", "business_object_id": None},
            "agent:acme:u1:run-1:create_order:step=tc%E2%80%A8%C3%A9",
        ),
    ],
)
def test_every_component_is_written_in_printable_ascii(
    parts: dict[str, str | None], expected: str
) -> None:
    """What is not printable ASCII, and a space (an HTTP header's value loses it at either
    end), is percent-encoded as UTF-8, as ``%`` and the separator ``:`` are."""
    values = {**BASE, "business_object_id": "cart-9", **parts}
    assert build_idempotency_key(scope=KeyScope.RUN, **values) == expected


@given(
    user=_component,
    run_id=_component,
    business_object_id=st.one_of(st.none(), _component),
    step_id=_component,
)
def test_the_downstream_kit_accepts_every_key_the_ledger_builds(
    user: str, run_id: str, business_object_id: str | None, step_id: str
) -> None:
    """Every key travels in an HTTP header and is kept by agent-ledger-downstream, whose
    ``check_key`` takes 1 to 1024 printable ASCII characters."""
    for scope in KeyScope:
        key = build_idempotency_key(
            scope=scope,
            tenant="acme",
            user=user,
            run_id=run_id,
            tool="create_order",
            business_object_id=business_object_id,
            step_id=step_id,
        )
        assert check_key(key) == key
        assert key == key.strip() and " " not in key


@given(name=_component)
def test_a_key_fields_business_object_makes_a_key_the_kit_accepts(name: str) -> None:
    """A key field's value (``Café``) goes into the key encoded; one whose encoding would be
    long is hashed, so the object stays short."""
    business_object = business_object_from(["name"], {"name": name})
    assert business_object is not None
    key = build_idempotency_key(scope=KeyScope.BUSINESS, business_object_id=business_object, **BASE)
    assert check_key(key) == key
    assert len(key.rsplit(":", 1)[1]) <= MAX_READABLE_OBJECT + len("sha256=") + 40
