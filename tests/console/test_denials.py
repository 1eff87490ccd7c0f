"""Every refusal is one event naming actor, tenant, object and reason, kept in the tenant's
audit when it happened inside the tenant (a role the user lacks there, a CSRF failure) and in
the installation's security log otherwise (another tenant's object, no membership, /admin/);
a flood is bounded: a few events a minute per actor, and a count of the rest."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.test import Client

from console.models import DenialWindow, SecurityEvent
from ledger import combinations
from ledger.models import AuditEvent, IdempotencyRecord, Run, Tool, VersionCombination
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


def _security(actor: str):
    return SecurityEvent.objects.filter(actor=actor, action="console.denied")


def _kept(key: str, log: str) -> tuple[int, int]:
    """(denials itemised, denials counted) of ``key`` in ``log``, past minutes included."""
    windows = DenialWindow.objects.filter(key=key, log=log)
    events = SecurityEvent.objects if log == "security" else AuditEvent.objects
    summaries = events.filter(actor=key, action__endswith="denied.suppressed")
    counted = sum(w.suppressed for w in windows) + sum(
        e.after["suppressed"] if log == "audit" else e.facts["suppressed"] for e in summaries
    )
    itemised = events.filter(action="console.denied").filter(actor=key).count()
    return itemised, counted


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
def test_a_cross_tenant_request_is_one_security_event_naming_the_object(
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
    # Kept where the prober's tenant cannot read it; it names the prober's tenant for the
    # installation's admins who can.
    assert not _denials("mallory").exists()
    [event] = _security("mallory")
    assert event.tenant == tenant
    assert (event.target_type, event.reason) == (model, "tenant")
    pk = {"approvalrequest": approval.pk, "idempotencyrecord": approval.record_id}.get(model)
    if pk is not None:
        assert event.target_id == str(pk)


def test_an_object_that_does_not_exist_is_kept_like_another_tenants(django_user_model, tenant):
    """The same work and the same log as a foreign id: only the installation's admins read
    which of the two it was."""
    client = signed_in(make_user(django_user_model, "mallory", tenant, "approver"))
    assert client.get("/approvals/999999/").status_code == 404
    assert not _denials("mallory").exists()
    [event] = _security("mallory")
    assert (event.target_type, event.target_id, event.reason) == (
        "approvalrequest",
        "999999",
        "not_found",
    )


def test_foreign_ids_in_a_bulk_selection_are_each_denied(django_user_model, tenant, theirs):
    approval, _ = theirs
    ours = make_pending(tenant, run_id="run-ours").record
    IdempotencyRecord.objects.filter(pk=ours.pk).update(state="unknown")
    client = signed_in(make_user(django_user_model, "mallory", tenant, "operator"))
    response = client.get(
        "/unknown/bulk", {"action": "lookup", "ids": [ours.pk, approval.record_id]}
    )
    assert response.status_code == 400  # the whole selection is refused, nothing done
    assert not _denials("mallory").exists()
    [event] = _security("mallory")
    assert (event.target_type, event.target_id) == ("idempotencyrecord", str(approval.record_id))
    assert event.reason == "tenant"


def test_switching_to_a_foreign_tenant_is_denied(django_user_model, tenant, other_tenant):
    client = signed_in(make_user(django_user_model, "mallory", tenant, "operator"))
    assert client.post("/tenant", {"tenant": other_tenant.pk}).status_code == 404
    assert not _denials("mallory").exists()
    [event] = _security("mallory")
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


@pytest.mark.parametrize("refusals", [132])
def test_every_refusal_of_a_user_with_no_membership_is_kept_in_the_security_log(
    django_user_model, settings, refusals
):
    """A signed-in user who belongs to no tenant: each refusal itemised or counted, in the
    security log (no tenant's audit could hold it), a bounded number of rows."""
    user = django_user_model.objects.create_user("drifter", password="pw-123456789")
    client = signed_in(user)
    for n in range(refusals):
        assert client.get(["/", "/audit/", "/approvals/"][n % 3]).status_code == 403
    itemised, counted = _kept("drifter", "security")
    assert itemised + counted == refusals
    assert itemised <= settings.CONSOLE_DENIALS_AUDITED_PER_MINUTE * 3
    assert {e.reason for e in _security("drifter")} == {"membership"}
    assert not AuditEvent.objects.filter(actor="drifter", outcome="denied").exists()


def test_a_csrf_failure_of_a_user_with_no_membership_is_in_the_security_log(django_user_model):
    user = django_user_model.objects.create_user("drifter", password="pw-123456789")
    client = Client(enforce_csrf_checks=True)
    client.force_login(user)
    assert client.post("/tenant", {"tenant": 1}).status_code == 403
    [event] = _security("drifter")
    assert event.reason == "csrf" and event.tenant is None
    assert not AuditEvent.objects.filter(actor="drifter", outcome="denied").exists()


def test_an_admin_page_refused_to_a_staff_user_is_kept(django_user_model, tenant):
    """/admin/ answers 403 to a staff user without the model's permission."""
    user = make_user(django_user_model, "stafford", tenant, "operator")
    user.is_staff = True
    user.save()
    client = signed_in(user)
    assert client.get("/admin/ledger/tenant/").status_code == 403
    [event] = _security("stafford")
    assert (event.reason, event.source, event.target_id) == (
        "permission",
        "admin",
        "/admin/ledger/tenant/",
    )
    assert event.tenant == tenant  # the user's own, for the installation's admins
    assert not _denials("stafford").exists()
