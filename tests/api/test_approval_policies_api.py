"""Approval policies through the API: a manager's change, audited with the token that made it
and the API as its source; bad input is a clear error that changes nothing."""

from __future__ import annotations

from typing import Any

import pytest

from ledger.models import ApprovalPolicy, AuditEvent, Tenant
from tests.api.conftest import ApiClient

pytestmark = pytest.mark.django_db

LARGE_ORDERS = {
    "name": "large orders",
    "reason": "orders over 100 need a second look",
    "tool": "create_order",
    "path": "amount",
    "operator": "gt",
    "value": 100,
}


def _delete(api: ApiClient, path: str) -> Any:
    return api.client.delete(f"/api/v1{path}", headers=api._headers(), secure=True)


def test_a_policy_added_and_removed_through_the_api_is_audited(
    api: ApiClient, tenant: Tenant
) -> None:
    added = api.post("/approval-policies", LARGE_ORDERS)
    assert added.status_code in (200, 201), added.content
    policy = ApprovalPolicy.objects.get(tenant=tenant)
    event = AuditEvent.objects.get(action="approval_policy.added")
    assert event.source == "api" and event.actor == policy.created_by
    assert policy.created_by.startswith("token:")
    assert event.target_id == str(policy.pk) and event.tenant_id == tenant.pk
    assert event.after["name"] == "large orders" and "amount" in event.after["asks_for"]

    listed = api.get("/approval-policies").json()
    assert [p["name"] for p in listed] == ["large orders"]

    removed = _delete(api, f"/approval-policies/{policy.pk}")
    assert removed.status_code in (200, 204), removed.content
    gone = AuditEvent.objects.get(action="approval_policy.removed")
    assert (gone.source, gone.actor, gone.before["name"]) == ("api", event.actor, "large orders")
    assert not ApprovalPolicy.objects.exists()


@pytest.mark.parametrize(
    "change",
    [
        {"operator": "between"},
        {"path": ""},
        {"value": None},
        {"name": ""},
    ],
    ids=["unknown-operator", "empty-path", "no-value", "no-name"],
)
def test_a_malformed_policy_is_refused_and_changes_nothing(
    api: ApiClient, change: dict[str, Any]
) -> None:
    answer = api.post("/approval-policies", {**LARGE_ORDERS, **change})
    assert answer.status_code in (400, 422), answer.content
    assert answer.json()["code"] and answer.json()["detail"], answer.json()
    assert not ApprovalPolicy.objects.exists()
    assert not AuditEvent.objects.filter(action__startswith="approval_policy.").exists()


def test_a_policy_of_another_tenant_cannot_be_removed(
    api: ApiClient, other_api: ApiClient, tenant: Tenant
) -> None:
    api.post("/approval-policies", LARGE_ORDERS)
    policy = ApprovalPolicy.objects.get(tenant=tenant)
    assert _delete(other_api, f"/approval-policies/{policy.pk}").status_code == 404
    assert ApprovalPolicy.objects.filter(pk=policy.pk).exists()


def test_a_call_a_policy_holds_names_the_policy(
    api: ApiClient,
) -> None:
    """A framework adapter forwards its own person's approval to a policy's hold only: the
    observation of a first run held by a policy names it (``approval_policy``); a replay's hold
    names none (``tests/api/test_replay.py``)."""
    api.post("/approval-policies", LARGE_ORDERS)
    api.start_run()
    held = api.call("create_order", {"amount": 500}, business_object_id="o-500").json()
    assert held["observation"]["code"] == "APPROVAL_REQUIRED"
    assert held["observation"]["metadata"]["approval_policy"] == "large orders"
