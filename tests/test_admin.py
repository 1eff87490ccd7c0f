"""Every model is visible in the admin; records, entries and audit events are read-only."""

from __future__ import annotations

import pytest
from django.contrib import admin
from django.contrib.auth import get_user_model
from django.test import Client

from ledger import models
from tests.factories import make_entry, reserve

pytestmark = pytest.mark.django_db


@pytest.fixture
def staff_client(tenant, create_order) -> Client:
    make_entry(tenant, create_order)
    reserve(tenant, create_order)
    user = get_user_model().objects.create_superuser("root", "root@example.com", "pw-123456789")
    client = Client()
    client.force_login(user)
    return client


def test_every_ledger_model_is_registered() -> None:
    ledger_models = {m for m in admin.site._registry if m._meta.app_label == "ledger"}
    assert ledger_models == set(
        m
        for m in models.__dict__.values()
        if isinstance(m, type)
        and issubclass(m, models.models.Model)
        and m._meta.app_label == "ledger"
        and not m._meta.abstract
    )


@pytest.mark.parametrize(
    "model",
    [
        "tenant",
        "apitoken",
        "mcpserver",
        "tool",
        "policyrule",
        "versioncombination",
        "run",
        "idempotencyrecord",
        "ledgerentry",
        "writeplan",
        "approvalrequest",
        "auditevent",
    ],
)
def test_changelist_loads(staff_client: Client, model: str) -> None:
    response = staff_client.get(f"/admin/ledger/{model}/", secure=True)
    assert response.status_code == 200


def test_audit_events_cannot_be_changed_in_the_admin(staff_client: Client) -> None:
    event = models.AuditEvent.objects.first()
    assert event is not None
    response = staff_client.post(f"/admin/ledger/auditevent/{event.pk}/delete/", secure=True)
    assert response.status_code == 403
    assert models.AuditEvent.objects.filter(pk=event.pk).exists()


def test_anonymous_users_are_sent_to_log_in() -> None:
    response = Client().get("/admin/ledger/idempotencyrecord/", secure=True)
    assert response.status_code == 302 and "/admin/login/" in response["Location"]
