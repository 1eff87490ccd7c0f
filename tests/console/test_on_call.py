"""The On call page: managers edit channels and service levels; bad input changes nothing;
another tenant's channel cannot be touched; a webhook's token never reaches the page."""

from __future__ import annotations

import pytest
from django.urls import reverse

from ledger import notifications
from ledger.models import AuditEvent, NotificationChannel, OnCallPolicy
from tests.console.conftest import make_user, signed_in
from tests.factories import make_tenant

pytestmark = pytest.mark.django_db
URL = reverse("console:on_call")
HOOK = "https://hooks.example.com/services/T0/B0/s3cr3t-token"


@pytest.fixture(autouse=True)
def _public_hooks(settings) -> None:
    # hooks.example.com does not resolve here; the list of hosts is what lets it in.
    settings.LEDGER_OUTBOUND_ALLOWED_HOSTS = ["hooks.example.com"]
    settings.LEDGER_OUTBOUND_ALLOW_PRIVATE = True


@pytest.fixture
def manager(django_user_model, tenant):
    return signed_in(make_user(django_user_model, "mia", tenant, "manager"))


def test_a_manager_adds_a_channel_and_the_token_is_never_shown(manager, tenant) -> None:
    response = manager.post(
        URL,
        {"action": "add_channel", "role": "operator", "tier": "2", "kind": "slack", "target": HOOK},
        secure=True,
    )
    assert response.status_code == 302
    channel = NotificationChannel.objects.get()
    assert (channel.tenant, channel.role, channel.tier, channel.kind, channel.target) == (
        tenant,
        "operator",
        2,
        "slack",
        HOOK,
    )
    event = AuditEvent.objects.get(action="notification_channel.created")
    assert event.actor == "mia" and "s3cr3t" not in str(event.after)
    page = manager.get(URL, secure=True).content.decode()
    assert "https://hooks.example.com/…" in page and "s3cr3t" not in page


def test_bad_input_is_explained_and_saves_nothing(manager) -> None:
    for data in (
        {
            "action": "add_channel",
            "role": "operator",
            "tier": "1",
            "kind": "email",
            "target": "<script>x</script>",
        },
        {
            "action": "add_channel",
            "role": "root",
            "tier": "1",
            "kind": "email",
            "target": "a@example.com",
        },
        {
            "action": "add_channel",
            "role": "operator",
            "tier": "one",
            "kind": "email",
            "target": "a@example.com",
        },
        {
            "action": "set_policy",
            "first_sla_minutes": "60",
            "second_sla_minutes": "15",
            "expiry_warning_minutes": "5",
        },
    ):
        page = manager.post(URL, data, secure=True, follow=True).content.decode()
        assert 'class="error"' in page and "<script>x" not in page
    assert not NotificationChannel.objects.exists() and not OnCallPolicy.objects.exists()


def test_a_manager_sets_the_service_levels(manager, tenant) -> None:
    manager.post(
        URL,
        {
            "action": "set_policy",
            "first_sla_minutes": "5",
            "second_sla_minutes": "30",
            "expiry_warning_minutes": "3",
        },
        secure=True,
    )
    policy = OnCallPolicy.objects.get(tenant=tenant)
    assert (policy.first_sla_minutes, policy.second_sla_minutes) == (5, 30)
    assert AuditEvent.objects.filter(action="on_call_policy.updated", actor="mia").exists()


def test_htmx_swaps_the_settings_in_place(manager) -> None:
    response = manager.post(
        URL,
        {
            "action": "add_channel",
            "role": "approver",
            "tier": "1",
            "kind": "email",
            "target": "approvers@example.com",
        },
        secure=True,
        HTTP_HX_REQUEST="true",
    )
    body = response.content.decode()
    assert response.status_code == 200 and body.lstrip().startswith('<div id="on-call">')
    assert "Channel added." in body and "…@example.com" in body


def test_another_tenants_channel_cannot_be_removed(manager) -> None:
    other = notifications.add_channel(
        tenant=make_tenant("globex"),
        actor="x",
        source="console",
        role="operator",
        tier=1,
        kind="email",
        target="ops@globex.example",
    )
    page = manager.post(
        URL, {"action": "remove_channel", "channel": str(other.pk)}, secure=True, follow=True
    ).content.decode()
    assert "No notification channel" in page
    assert NotificationChannel.objects.filter(pk=other.pk).exists()


def test_a_manager_removes_a_channel(manager, tenant) -> None:
    channel = notifications.add_channel(
        tenant=tenant,
        actor="x",
        source="console",
        role="operator",
        tier=1,
        kind="email",
        target="ops@example.com",
    )
    manager.post(URL, {"action": "remove_channel", "channel": str(channel.pk)}, secure=True)
    assert not NotificationChannel.objects.exists()
    assert AuditEvent.objects.filter(action="notification_channel.removed", actor="mia").exists()
