"""The approval policies page: a manager adds and removes policies, audited; bad input is
refused beside the form and changes nothing; nobody else may."""

from __future__ import annotations

import pytest

from ledger.models import ApprovalPolicy, AuditEvent
from tests.console.conftest import make_user, signed_in

pytestmark = pytest.mark.django_db

LARGE_ORDERS = {
    "action": "add",
    "name": "large orders",
    "tool": "create_order",
    "path": "amount",
    "operator": "gt",
    "value": "100",
    "reason": "orders over 100 need a second look",
}


@pytest.fixture
def manager(django_user_model, tenant):
    return make_user(django_user_model, "mia", tenant, "manager")


def test_a_manager_adds_a_policy_and_sees_what_it_asks_for(manager) -> None:
    page = signed_in(manager).post("/policies/", LARGE_ORDERS, follow=True).content.decode()
    policy = ApprovalPolicy.objects.get()
    assert (policy.tool, policy.path, policy.operator, policy.value) == (
        "create_order",
        "amount",
        "gt",
        100,
    )
    assert "tool create_order and amount gt 100" in page
    event = AuditEvent.objects.get(action="approval_policy.added")
    assert event.actor == "mia" and event.after["name"] == "large orders"


def test_a_malformed_policy_is_refused_and_nothing_is_added(manager) -> None:
    page = (
        signed_in(manager)
        .post("/policies/", {**LARGE_ORDERS, "value": "a lot"}, follow=True)
        .content.decode()
    )
    assert "compares with a number" in page
    assert not ApprovalPolicy.objects.exists()


def test_a_manager_removes_a_policy(manager) -> None:
    client = signed_in(manager)
    client.post("/policies/", LARGE_ORDERS)
    policy = ApprovalPolicy.objects.get()
    client.post("/policies/", {"action": "remove", "policy": policy.pk})
    assert not ApprovalPolicy.objects.exists()
    assert AuditEvent.objects.filter(action="approval_policy.removed").exists()


@pytest.mark.parametrize("role", ["", "operator", "approver"])
def test_only_managers_set_policies(django_user_model, tenant, role: str) -> None:
    client = signed_in(make_user(django_user_model, "someone", tenant, role))
    assert client.get("/policies/").status_code == 403
    assert client.post("/policies/", LARGE_ORDERS).status_code == 403
    assert not ApprovalPolicy.objects.exists()
