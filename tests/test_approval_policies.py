"""When an approval policy asks a human before an action first runs (``ledger.approval_policies``):
every part it names must match; what cannot be compared is asked; reads never are."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ledger.approval_policies import PolicySpec, asking_policy, matches, spec_problem
from ledger.domain import Idempotency


def _spec(**parts: Any) -> PolicySpec:
    return PolicySpec(id=parts.pop("id", 1), name="p", reason="r", **parts)


def _matches(spec: PolicySpec, tool: str = "create_order", **call: Any) -> bool:
    return matches(
        spec,
        tool=tool,
        tool_input=call.get("tool_input", {}),
        write_path=call.get("write_path"),
        combination_id=call.get("combination_id"),
    )


@pytest.mark.parametrize(
    ("spec", "tool_input", "asked"),
    [
        (
            _spec(tool="create_order", path="amount", operator="gt", value=100),
            {"amount": 500},
            True,
        ),
        (
            _spec(tool="create_order", path="amount", operator="gt", value=100),
            {"amount": 50},
            False,
        ),
        (
            _spec(tool="create_order", path="amount", operator="gt", value=100),
            {"amount": 100},
            False,
        ),
        (
            _spec(tool="create_order", path="amount", operator="gte", value=100),
            {"amount": 100},
            True,
        ),
        (_spec(path="amount", operator="lt", value=0), {"amount": -1}, True),
        (_spec(path="amount", operator="lte", value=0), {"amount": 0.5}, False),
        (_spec(path="cart.total", operator="gt", value=10), {"cart": {"total": 11}}, True),
        (
            _spec(path="items.0.sku", operator="eq", value="gold"),
            {"items": [{"sku": "gold"}]},
            True,
        ),
        (_spec(path="currency", operator="ne", value="EUR"), {"currency": "USD"}, True),
        (_spec(path="currency", operator="eq", value=1), {"currency": True}, False),
        (_spec(path="target", operator="prefix", value="prod/"), {"target": "prod/db"}, True),
        (_spec(path="target", operator="prefix", value="prod/"), {"target": "dev/db"}, False),
        (_spec(path="query", operator="contains", value="DROP"), {"query": "x DROP y"}, True),
        # Missing: no match. Present but not comparable: asked.
        (_spec(path="amount", operator="gt", value=100), {}, False),
        (_spec(path="amount", operator="gt", value=100), {"amount": "9999"}, True),
        (_spec(path="amount", operator="gt", value=100), {"amount": None}, True),
        (_spec(path="target", operator="prefix", value="prod/"), {"target": 7}, True),
    ],
)
def test_a_condition_on_an_argument(spec: PolicySpec, tool_input: Any, asked: bool) -> None:
    assert _matches(spec, tool_input=tool_input) is asked


def test_a_tool_glob_a_write_prefix_and_a_combination_must_all_match() -> None:
    spec = _spec(tool="charge_*", write_prefix="prod/", combination_id=7)
    assert _matches(spec, "charge_customer", write_path="prod/x", combination_id=7)
    assert not _matches(spec, "create_order", write_path="prod/x", combination_id=7)
    assert not _matches(spec, "charge_customer", write_path="dev/x", combination_id=7)
    assert not _matches(spec, "charge_customer", write_path=None, combination_id=7)
    assert not _matches(spec, "charge_customer", write_path="prod/x", combination_id=8)


def test_reads_are_never_asked_and_the_oldest_matching_policy_asks() -> None:
    older, newer = _spec(id=1, tool="*"), _spec(id=2, tool="create_order")
    call = {"tool": "create_order", "tool_input": {}, "write_path": None, "combination_id": None}
    assert asking_policy([newer, older], idempotency=Idempotency.NON_IDEMPOTENT, **call) == older
    assert asking_policy([newer, older], idempotency=Idempotency.CONDITIONAL, **call) == older
    assert asking_policy([older], idempotency=Idempotency.IDEMPOTENT, **call) is None


@pytest.mark.parametrize(
    ("parts", "problem"),
    [
        ({}, "say which calls"),
        ({"tool": "bad name!"}, "glob"),
        ({"path": "amount"}, "both an argument path and an operator"),
        ({"path": "a b", "operator": "gt", "value": 1}, "dotted path"),
        ({"path": "amount", "operator": "gt", "value": "100"}, "compares with a number"),
        ({"path": "amount", "operator": "gt", "value": float("nan")}, "compares with a number"),
        ({"path": "target", "operator": "prefix", "value": 3}, "compares with a text"),
        ({"path": "amount", "operator": "about", "value": 3}, "operator is one of"),
        ({"tool": "x", "value": 3}, "needs an argument path"),
    ],
)
def test_a_malformed_policy_is_refused(parts: dict[str, Any], problem: str) -> None:
    full = {"tool": "", "path": "", "operator": "", "value": None, "write_prefix": "", **parts}
    assert problem in (spec_problem(**full) or "")


@given(amount=st.integers(min_value=-(10**9), max_value=10**9), limit=st.integers(-100, 100))
def test_gt_asks_exactly_above_the_limit(amount: int, limit: int) -> None:
    spec = _spec(path="amount", operator="gt", value=limit)
    assert _matches(spec, tool_input={"amount": amount}) is (amount > limit)
