"""A probe of another tenant's id tells the prober nothing: its answer is byte for byte the
answer for an id that does not exist, and it is kept in the installation's security log, which
only superusers read, never in the prober's own tenant's audit (page or CSV)."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from django.db import DatabaseError, transaction
from django.test import Client

from console.models import SecurityEvent
from ledger.models import ApprovalRequest, IdempotencyRecord, LedgerEntry
from tests.console.conftest import make_pending, make_user, signed_in

pytestmark = pytest.mark.django_db


def _missing_like(model: Any, pk: int) -> int:
    """An id of ``model`` with as many digits as ``pk`` that names nothing."""
    candidate = 10 ** len(str(pk)) - 1
    while model._default_manager.filter(pk=candidate).exists():
        candidate -= 1
    assert len(str(candidate)) == len(str(pk))
    return candidate


def _answer(response: Any, path: str) -> tuple[int, bytes, list[tuple[str, str]], dict]:
    """Everything the client receives, the path asked for (which holds the id) replaced."""
    return (
        response.status_code,
        response.content.replace(path.encode(), b"<path>"),
        sorted(response.items()),
        {name: morsel.OutputString() for name, morsel in response.cookies.items()},
    )


@pytest.fixture
def prober(django_user_model, tenant) -> Client:
    return signed_in(make_user(django_user_model, "mallory", tenant, "admin"))


@pytest.mark.parametrize(
    ("url", "model"),
    [
        ("/approvals/{}/", ApprovalRequest),
        ("/ledger/records/{}/", IdempotencyRecord),
        ("/ledger/calls/{}/", LedgerEntry),
        ("/unknown/{}/", IdempotencyRecord),
    ],
)
def test_a_foreign_id_is_answered_exactly_like_a_missing_one(
    prober, other_tenant, url, model
) -> None:
    approval = make_pending(other_tenant)
    theirs = {
        ApprovalRequest: approval.pk,
        IdempotencyRecord: approval.record_id,
        LedgerEntry: approval.entry_id,
    }[model]
    missing = _missing_like(model, theirs)
    foreign = prober.get(url.format(theirs), secure=True)
    nothing = prober.get(url.format(missing), secure=True)
    assert foreign.status_code == 404
    assert _answer(foreign, url.format(theirs)) == _answer(nothing, url.format(missing))
    reasons = {e.target_id: e.reason for e in SecurityEvent.objects.filter(actor="mallory")}
    assert reasons == {str(theirs): "tenant", str(missing): "not_found"}


def test_the_probers_audit_page_and_csv_do_not_mention_the_probe(
    prober, tenant, other_tenant
) -> None:
    approval = make_pending(other_tenant)
    make_pending(tenant, run_id="run-ours")  # the prober's tenant has an audit of its own
    page_before = [e.pk for e in prober.get("/audit/", secure=True).context["events"]]
    csv_before = prober.get("/audit/", {"format": "csv"}, secure=True).getvalue()
    for url in (f"/approvals/{approval.pk}/", f"/ledger/records/{approval.record_id}/"):
        assert prober.get(url, secure=True).status_code == 404
    assert prober.post("/tenant", {"tenant": other_tenant.pk}, secure=True).status_code == 404
    page_after = [e.pk for e in prober.get("/audit/", secure=True).context["events"]]
    csv_after = prober.get("/audit/", {"format": "csv"}, secure=True).getvalue()
    assert (page_after, csv_after) == (page_before, csv_before)
    denied = prober.get("/audit/", {"outcome": "denied"}, secure=True)
    assert list(denied.context["events"]) == []
    kept = SecurityEvent.objects.filter(actor="mallory").order_by("pk")
    assert [(e.target_type, e.target_id, e.reason, e.tenant_id) for e in kept] == [
        ("approvalrequest", str(approval.pk), "tenant", tenant.pk),
        ("idempotencyrecord", str(approval.record_id), "tenant", tenant.pk),
        ("tenant", str(other_tenant.pk), "tenant", tenant.pk),
    ]


def _event(tenant) -> SecurityEvent:
    return SecurityEvent.objects.create(
        tenant=tenant,
        actor="mallory",
        action="console.denied",
        reason="tenant",
        target_type="approvalrequest",
        target_id="7",
        source="console",
    )


def test_the_security_log_is_read_by_superusers_only(django_user_model, tenant) -> None:
    event = _event(tenant)
    root = get_user_model().objects.create_superuser("root", "root@example.com", "pw-123456789")
    listing = signed_in(root).get("/admin/console/securityevent/", secure=True)
    assert listing.status_code == 200 and b"mallory" in listing.content
    # A tenant admin with staff status and every permission on the model still reads nothing.
    staff = make_user(django_user_model, "tadmin", tenant, "admin")
    staff.is_staff = True
    staff.save()
    staff.user_permissions.set(Permission.objects.filter(codename__endswith="securityevent"))
    client = signed_in(staff)
    assert client.get("/admin/console/securityevent/", secure=True).status_code == 403
    assert client.get(f"/admin/console/securityevent/{event.pk}/change/").status_code == 403
    assert b"securityevent" not in client.get("/admin/", secure=True).content


def test_the_security_log_is_read_only_in_the_admin(tenant) -> None:
    event = _event(tenant)
    root = signed_in(
        get_user_model().objects.create_superuser("root", "root@example.com", "pw-123456789")
    )
    assert root.get("/admin/console/securityevent/add/", secure=True).status_code == 403
    change = root.post(
        f"/admin/console/securityevent/{event.pk}/change/", {"actor": "x"}, secure=True
    )
    assert change.status_code == 403
    assert (
        root.post(
            f"/admin/console/securityevent/{event.pk}/delete/", {"post": "yes"}, secure=True
        ).status_code
        == 403
    )
    event.refresh_from_db()
    assert event.actor == "mallory"


@pytest.mark.parametrize("change", ["update", "delete"])
def test_the_security_log_is_append_only_in_the_database(tenant, change) -> None:
    event = _event(tenant)
    rows = SecurityEvent.objects.filter(pk=event.pk)
    with pytest.raises(DatabaseError), transaction.atomic():
        rows.update(actor="someone else") if change == "update" else rows.delete()
