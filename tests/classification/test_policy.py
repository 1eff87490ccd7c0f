"""Org policy rules and human overrides come last and are the tenant's own decisions."""

from __future__ import annotations

import pytest

from ledger.classification.catalogue import CATALOGUE
from ledger.classification.policy import (
    Override,
    PolicyRule,
    declared_classification,
    effective_classification,
)
from ledger.domain import POLICY_FOR, Idempotency, ReplayPolicy


def test_catalogue_policies_match_their_idempotency() -> None:
    for tool in CATALOGUE.values():
        assert tool.classification.replay_policy is POLICY_FOR[tool.classification.idempotency]


def test_catalogue_matches_the_seed() -> None:
    expected = {
        "read_file": ReplayPolicy.AUTO,
        "list_files": ReplayPolicy.AUTO,
        "search_code": ReplayPolicy.AUTO,
        "get_order_status": ReplayPolicy.AUTO,
        "pure_compute": ReplayPolicy.AUTO,
        "write_file": ReplayPolicy.ASK,
        "apply_patch": ReplayPolicy.ASK,
        "update_config": ReplayPolicy.ASK,
        "send_email": ReplayPolicy.NEVER,
        "create_order": ReplayPolicy.NEVER,
        "charge_customer": ReplayPolicy.NEVER,
        "create_issue": ReplayPolicy.NEVER,
        "merge_pull_request": ReplayPolicy.NEVER,
        "run_migration": ReplayPolicy.NEVER,
    }
    assert {n: t.classification.replay_policy for n, t in CATALOGUE.items()} == expected


def test_undeclared_custom_tool_is_non_idempotent() -> None:
    assert declared_classification("my_tool", None).idempotency is Idempotency.NON_IDEMPOTENT


def test_declaration_cannot_make_a_catalogue_tool_less_conservative() -> None:
    result = declared_classification("send_email", Idempotency.IDEMPOTENT)
    assert result.idempotency is Idempotency.NON_IDEMPOTENT


def test_a_declared_read_is_believed_where_the_name_or_description_reads_as_one() -> None:
    assert declared_classification("get_order", Idempotency.IDEMPOTENT).replay_policy is (
        ReplayPolicy.AUTO
    )
    described = declared_classification(
        "lookup_price", Idempotency.IDEMPOTENT, "Returns the price of a product."
    )
    assert described.replay_policy is ReplayPolicy.AUTO


@pytest.mark.parametrize("name", ["place_order_v2", "lookup_price", "sync_crm"])
def test_a_declaration_never_loosens_what_the_name_says(name: str) -> None:
    declared = declared_classification(name, Idempotency.IDEMPOTENT)
    assert declared.replay_policy is ReplayPolicy.NEVER
    assert declared.rule == "declared.stricter" and "only make a tool stricter" in declared.reason


def test_a_declaration_may_always_make_a_tool_stricter() -> None:
    assert declared_classification("get_order", Idempotency.NON_IDEMPOTENT).replay_policy is (
        ReplayPolicy.NEVER
    )


def test_first_matching_policy_rule_wins_then_override() -> None:
    base = declared_classification("billing_refund", None)
    rules = [
        PolicyRule("billing_*", Idempotency.CONDITIONAL, False, "billing is reviewed", "1"),
        PolicyRule("*", Idempotency.IDEMPOTENT, False, "never reached", "2"),
    ]
    with_policy = effective_classification(base, tool_name="billing_refund", rules=rules)
    assert with_policy.idempotency is Idempotency.CONDITIONAL
    assert with_policy.rule == "policy.1"
    override = Override(Idempotency.NON_IDEMPOTENT, True, "moves money", "alice")
    final = effective_classification(
        base, tool_name="billing_refund", rules=rules, override=override
    )
    assert final.idempotency is Idempotency.NON_IDEMPOTENT
    assert final.destructive and "alice" in final.reason and final.rule == "override"
