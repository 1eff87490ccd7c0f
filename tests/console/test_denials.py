"""Every refusal is one audit event naming actor, tenant, object and reason; a flood is
bounded: a few events a minute per actor, and a count of the rest."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.test import Client

from console.models import DenialWindow
from ledger.models import AuditEvent, IdempotencyRecord, Run, Tool, VersionCombination
from ledger.services import combinations
from tests.console.conftest import make_pending, make_user, signed_in

pytestmark = pytest.mark.django_db


@pytest.fixture
def theirs(other_tenant):
    """Objects of another tenant: an approval (with its run and record), a combination."""
    approval = make_pending(other_tenant)
    combination, _ = combinations.create_combination(
        tenant=other_tenant,
        label="x",
        actor="t",
        source="api",
        model="m",
        prompt="p",
        rules="r",
        tool_schema="t",
        data_version="d",
    )
    return approval, combination


def _denials(actor: str):
    return AuditEvent.objects.filter(actor=actor, outcome="denied", action="console.denied")


@pytest.mark.parametrize(
    ("method", "url", "model", "role"),
    [
        ("get", "/approvals/{approval}/", "approvalrequest", "approver"),
        ("post", "/approvals/{approval}/decide", "approvalrequest", "approver"),
        ("get", "/unknown/{record}/", "idempotencyrecord", "operator"),
        ("post", "/unknown/{record}/action", "idempotencyrecord", "operator"),
        ("get", "/ledger/runs/{run}/", "run", "operator"),
        ("post", "/combinations/{combination}/resume", "versioncombination", "manager"),
        ("get", "/combinations/{combination}/rollback", "versioncombination", "manager"),
        ("post", "/tools/{tool}/override", "tool", "manager"),
    ],
)
def test_a_cross_tenant_request_writes_one_denied_event_naming_the_object(
    django_user_model, tenant, theirs, method, url, model, role
):
    approval, combination = theirs
    ids = {
        "approval": approval.pk,
        "record": approval.record_id,
        "run": approval.entry.run_id,
        "combination": combination.pk,
        "tool": Tool.objects.filter(tenant=approval.tenant).first().pk,
    }
    client = signed_in(make_user(django_user_model, "mallory", tenant, role))
    response = getattr(client, method)(url.format(**ids), {"decision": "approve"})
    assert response.status_code == 404
    [event] = _denials("mallory")
    assert event.tenant == tenant  # the actor's tenant, where their admins look
    assert (event.target_type, event.after["reason"]) == (model, "tenant")
    pk = {"approvalrequest": approval.pk, "idempotencyrecord": approval.record_id}.get(model)
    if pk is not None:
        assert event.target_id == str(pk)


def test_an_object_that_does_not_exist_is_a_404_without_a_denial(django_user_model, tenant):
    client = signed_in(make_user(django_user_model, "mallory", tenant, "approver"))
    assert client.get("/approvals/999999/").status_code == 404
    assert not _denials("mallory").exists()


def test_foreign_ids_in_a_bulk_selection_are_each_denied(django_user_model, tenant, theirs):
    approval, _ = theirs
    ours = make_pending(tenant, run_id="run-ours").record
    IdempotencyRecord.objects.filter(pk=ours.pk).update(state="unknown")
    client = signed_in(make_user(django_user_model, "mallory", tenant, "operator"))
    response = client.get(
        "/unknown/bulk", {"action": "lookup", "ids": [ours.pk, approval.record_id]}
    )
    assert response.status_code == 400  # the whole selection is refused, nothing done
    [event] = _denials("mallory")
    assert (event.target_type, event.target_id) == ("idempotencyrecord", str(approval.record_id))


def test_switching_to_a_foreign_tenant_is_denied(django_user_model, tenant, other_tenant):
    client = signed_in(make_user(django_user_model, "mallory", tenant, "operator"))
    assert client.post("/tenant", {"tenant": other_tenant.pk}).status_code == 404
    [event] = _denials("mallory")
    assert (event.target_type, event.target_id) == ("tenant", str(other_tenant.pk))


def test_a_csrf_failure_is_a_denied_event(django_user_model, tenant, pending):
    user = make_user(django_user_model, "carol", tenant, "approver")
    client = Client(enforce_csrf_checks=True)
    client.force_login(user)
    response = client.post(f"/approvals/{pending.pk}/decide", {"decision": "approve"})
    assert response.status_code == 403
    [event] = _denials("carol")
    assert event.after["reason"] == "csrf" and event.tenant == tenant
    assert event.target_id == f"/approvals/{pending.pk}/decide"
    pending.refresh_from_db()
    assert pending.state == "pending"


@pytest.mark.parametrize("flood", [pytest.param(1000, marks=pytest.mark.scale), 200])
def test_a_flood_of_denied_gets_writes_a_bounded_number_of_rows_and_a_count(
    django_user_model, tenant, settings, flood
):
    """A thousand denied requests in a minute (``make drill``; 200 in ``make test``, twenty
    times the per-minute limit)."""
    client = signed_in(make_user(django_user_model, "flood", tenant, "operator"))
    for _ in range(flood):
        assert client.get("/combinations/").status_code == 403
    limit = settings.CONSOLE_DENIALS_AUDITED_PER_MINUTE
    itemised = AuditEvent.objects.filter(action="console.denied", actor="flood").count()
    windows = DenialWindow.objects.filter(key="flood")
    # A minute that ended during the loop is already summarised (and its window dropped).
    summaries = AuditEvent.objects.filter(action="console.denied.suppressed", actor="flood")
    suppressed = sum(w.suppressed for w in windows.all()) + sum(
        e.after["suppressed"] for e in summaries.all()
    )
    minutes = windows.count() + summaries.count()
    assert itemised + suppressed == flood  # every denial itemised or counted
    # (a minute with no more than the limit leaves no summary, hence the one extra)
    assert minutes <= 3 and itemised <= limit * (minutes + 1)

    # Once the minute is over, its count becomes one summary event (none if nothing was
    # suppressed in it: a minute that began at the loop's very end).
    live = sum(w.suppressed for w in windows.all())
    before = summaries.count()
    windows.update(window_start=windows.first().window_start - timedelta(minutes=5))
    client.get("/combinations/")
    assert summaries.count() == before + (1 if live else 0)
    assert summaries.order_by("-pk").first().after["suppressed"] == (live or suppressed)
    assert DenialWindow.objects.filter(key="flood").count() == 1  # the new minute's


def test_another_tenants_run_or_combination_lists_nothing(django_user_model, tenant, theirs):
    """Listing pages are filtered, not denied: nothing of another tenant shows."""
    client = signed_in(make_user(django_user_model, "mallory", tenant, "admin"))
    assert client.get("/ledger/runs/").context["rows"] == []
    assert Run.objects.exclude(tenant=tenant).exists()
    assert VersionCombination.objects.exclude(tenant=tenant).exists()
    assert not _denials("mallory").exists()


def test_denied_attempts_are_in_the_audit_log(django_user_model, tenant, pending) -> None:
    operator = signed_in(make_user(django_user_model, "olga", tenant, "operator"))
    assert (
        operator.post(
            f"/approvals/{pending.pk}/decide", {"decision": "approve"}, secure=True
        ).status_code
        == 403
    )
    assert operator.get("/combinations/", secure=True).status_code == 403
    denied = AuditEvent.objects.filter(outcome="denied", action="console.denied", actor="olga")
    assert sorted((e.target_type, e.target_id) for e in denied) == [
        ("approvalrequest", str(pending.pk)),
        ("page", "/combinations/"),
    ]
    assert {e.after["reason"] for e in denied} == {"role"}
    assert all(e.tenant_id == tenant.pk for e in denied)
    page = operator.get("/audit/", {"outcome": "denied"}, secure=True)
    assert len(page.context["events"]) == 2
