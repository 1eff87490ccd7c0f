"""Every model is visible in the admin; records, entries and audit events are read-only."""

from __future__ import annotations

import re

import pytest
from django.apps import apps
from django.contrib import admin
from django.contrib.auth import get_user_model
from django.test import Client

from ledger import models
from reconcile.models import CompensationAdapter, DownstreamAdapter
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
    assert ledger_models == set(apps.get_app_config("ledger").get_models())


def test_every_ledger_model_is_importable_from_ledger_models() -> None:
    defined = {m.__name__: m for m in apps.get_app_config("ledger").get_models()}
    assert {name: getattr(models, name, None) for name in defined} == defined
    assert sorted(models.__all__) == sorted(defined)


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
        "notificationchannel",
        "notification",
        "oncallpolicy",
        "declaredcompensation",
        "compensation",
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


@pytest.fixture
def tenant_admin(tenant, other_tenant) -> Client:
    """A staff user who is an admin of ``tenant`` only (no Django model permissions)."""
    from ledger.models import Membership

    user = get_user_model().objects.create_user("tadmin", password="pw-123456789", is_staff=True)
    Membership.objects.create(user=user, tenant=tenant, role="admin")
    client = Client()
    client.force_login(user)
    return client


def test_a_tenant_admin_manages_their_tenants_memberships_audited(
    tenant_admin: Client, tenant, other_tenant
) -> None:
    from ledger.models import Membership

    User = get_user_model()
    ours = User.objects.create_user("ours")
    theirs = User.objects.create_user("theirs")
    Membership.objects.create(user=theirs, tenant=other_tenant, role="approver")
    listing = tenant_admin.get("/admin/ledger/membership/").content.decode()
    assert "tadmin" in listing and "theirs" not in listing
    added = tenant_admin.post(
        "/admin/ledger/membership/add/", {"user": ours.pk, "tenant": tenant.pk, "role": "operator"}
    )
    assert added.status_code == 302
    membership = Membership.objects.get(user=ours)
    event = models.AuditEvent.objects.get(action="admin.membership.added")
    assert event.actor == "tadmin" and event.tenant == tenant and event.source == "admin"
    assert event.after["role"] == "operator" and event.target_id == str(membership.pk)

    changed = tenant_admin.post(
        f"/admin/ledger/membership/{membership.pk}/change/",
        {"user": ours.pk, "tenant": tenant.pk, "role": "approver"},
    )
    assert changed.status_code == 302
    event = models.AuditEvent.objects.get(action="admin.membership.changed")
    assert event.before == {"role": "operator"} and event.after == {"role": "approver"}

    # Another tenant's memberships cannot be made, seen or changed.
    foreign = tenant_admin.post(
        "/admin/ledger/membership/add/",
        {"user": ours.pk, "tenant": other_tenant.pk, "role": "admin"},
    )
    assert foreign.status_code == 200 and "Select a valid choice" in foreign.content.decode()
    assert not Membership.objects.filter(user=ours, tenant=other_tenant).exists()
    other = Membership.objects.get(user=theirs)
    assert tenant_admin.get(f"/admin/ledger/membership/{other.pk}/change/").status_code == 302
    assert tenant_admin.post(f"/admin/ledger/membership/{other.pk}/delete/").status_code == 302
    assert Membership.objects.filter(pk=other.pk).exists()

    deleted = tenant_admin.post(
        f"/admin/ledger/membership/{membership.pk}/delete/", {"post": "yes"}
    )
    assert deleted.status_code == 302 and not Membership.objects.filter(pk=membership.pk).exists()
    event = models.AuditEvent.objects.get(action="admin.membership.deleted")
    assert event.before["role"] == "approver" and event.before["user"] == ours.pk


def test_a_member_who_is_not_a_tenant_admin_cannot_manage_memberships(tenant) -> None:
    from ledger.models import Membership

    user = get_user_model().objects.create_user("staffer", password="pw-123456789", is_staff=True)
    Membership.objects.create(user=user, tenant=tenant, role="manager")
    client = Client()
    client.force_login(user)
    assert client.get("/admin/ledger/membership/").status_code == 403


def test_every_admin_page_is_audited() -> None:
    from ledger.admin import AuditedAdmin

    assert admin.site._registry
    assert all(isinstance(a, AuditedAdmin) for a in admin.site._registry.values())


def test_editing_a_tenant_or_an_mcp_servers_trust_is_audited(staff_client: Client, tenant) -> None:
    changed = staff_client.post(
        f"/admin/ledger/tenant/{tenant.pk}/change/", {"slug": tenant.slug, "name": "Acme Ltd"}
    )
    assert changed.status_code == 302
    event = models.AuditEvent.objects.get(action="admin.tenant.changed")
    assert event.actor == "root" and event.tenant == tenant and event.source == "admin"
    assert event.before == {"name": tenant.name} and event.after == {"name": "Acme Ltd"}

    server = models.McpServer.objects.create(tenant=tenant, name="git", trust="untrusted")
    staff_client.post(
        f"/admin/ledger/mcpserver/{server.pk}/change/",
        {"tenant": tenant.pk, "name": "git", "trust": "trusted"},
    )
    event = models.AuditEvent.objects.get(action="admin.mcpserver.changed")
    assert event.before == {"trust": "untrusted"} and event.after == {"trust": "trusted"}


def test_a_tokens_tenant_cannot_be_changed_in_the_admin(
    staff_client: Client, tenant, other_tenant
) -> None:
    token, _plaintext = models.ApiToken.issue(tenant=tenant, name="runtime")
    page = staff_client.get(f"/admin/ledger/apitoken/{token.pk}/change/").content.decode()
    assert 'name="tenant"' not in page and 'name="user"' not in page
    response = staff_client.post(
        f"/admin/ledger/apitoken/{token.pk}/change/",
        {"name": "renamed", "tenant": other_tenant.pk, "revoked_at_0": "", "revoked_at_1": ""},
    )
    assert response.status_code == 302
    token.refresh_from_db()
    assert token.tenant == tenant and token.name == "renamed"
    event = models.AuditEvent.objects.get(action="admin.apitoken.changed")
    assert event.after == {"name": "renamed"} and "token_hash" not in str(event.before)


def test_a_password_set_in_the_admin_is_audited_without_the_password(
    staff_client: Client,
) -> None:
    user = get_user_model().objects.create_user("someone", password="old-password-123")
    response = staff_client.post(
        f"/admin/auth/user/{user.pk}/password/",
        {"password1": "new-password-4567!", "password2": "new-password-4567!"},
    )
    assert response.status_code == 302
    event = models.AuditEvent.objects.get(action="admin.user.changed")
    assert event.target_id == str(user.pk) and event.actor == "root"
    assert "new-password" not in str(event.after) and "pbkdf2" not in str(event.after)


def test_unlocking_a_locked_out_sign_in_is_audited(staff_client: Client) -> None:
    from axes.models import AccessAttempt

    attempt = AccessAttempt.objects.create(
        username="alice", ip_address="10.0.0.1", failures_since_start=20, user_agent=""
    )
    response = staff_client.post(f"/admin/axes/accessattempt/{attempt.pk}/delete/", {"post": "yes"})
    assert response.status_code == 302 and not AccessAttempt.objects.exists()
    event = models.AuditEvent.objects.get(action="admin.accessattempt.deleted")
    assert event.before["username"] == "alice"


def test_the_adapter_list_hides_the_look_up_secret_in_its_url(
    staff_client: Client, tenant, create_order
) -> None:
    DownstreamAdapter.objects.create(
        tenant=tenant,
        tool=create_order,
        url_template="http://billing:8026/idempotency/{key}?scope=agent&access_token=s3cr3t-v4lue",
    )
    page = staff_client.get("/admin/reconcile/downstreamadapter/", secure=True)
    assert page.status_code == 200
    assert b"s3cr3t-v4lue" not in page.content
    assert b"http://billing:8026/idempotency/{key}?scope=agent&amp;access_token=***" in page.content


def test_a_channels_webhook_token_is_not_shown(staff_client: Client, tenant, settings) -> None:
    from ledger import notifications

    settings.LEDGER_OUTBOUND_ALLOWED_HOSTS = ["hooks.example.com"]
    settings.LEDGER_OUTBOUND_ALLOW_PRIVATE = True
    channel = notifications.add_channel(
        tenant=tenant,
        actor="m",
        source="console",
        role="operator",
        tier=1,
        kind="slack",
        target="https://hooks.example.com/services/T0/B0/s3cr3t-token",
    )
    for url in (
        "/admin/ledger/notificationchannel/",
        f"/admin/ledger/notificationchannel/{channel.pk}/change/",
    ):
        response = staff_client.get(url, secure=True)
        assert response.status_code == 200 and b"s3cr3t" not in response.content
        assert b"hooks.example.com" in response.content


@pytest.mark.parametrize(
    ("url", "error"),
    [
        ("http://169.254.169.254/latest/meta-data/{key}", "non-public address"),
        ("http://127.0.0.1:8000/admin/{key}", "non-public address"),
        ("file:///etc/passwd#{key}", "only http(s) URLs"),
    ],
)
def test_an_adapter_whose_look_up_url_is_not_allowed_is_not_registered(
    staff_client: Client, tenant, create_order, url: str, error: str
) -> None:
    response = staff_client.post(
        "/admin/reconcile/downstreamadapter/add/",
        {
            "tenant": tenant.pk,
            "tool": create_order.pk,
            "kind": "http",
            "url_template": url,
            "found_statuses": "[200]",
            "not_found_statuses": "[404]",
            "timeout_seconds": "5",
            "grace_seconds": "30",
            "max_attempts": "5",
        },
        secure=True,
    )
    assert response.status_code == 200  # the form again, with the error
    assert error in response.content.decode()
    assert not DownstreamAdapter.objects.exists()


def test_an_adapter_on_an_allowed_host_is_registered(
    staff_client: Client, tenant, create_order, settings
) -> None:
    settings.LEDGER_OUTBOUND_ALLOW_PRIVATE = True  # the only host that resolves here is local
    response = staff_client.post(
        "/admin/reconcile/downstreamadapter/add/",
        {
            "tenant": tenant.pk,
            "tool": create_order.pk,
            "kind": "http",
            "url_template": "http://127.0.0.1:8026/idempotency/{key}",
            "found_statuses": "[200]",
            "not_found_statuses": "[404]",
            "timeout_seconds": "5",
            "grace_seconds": "30",
            "max_attempts": "5",
        },
        secure=True,
    )
    assert response.status_code == 302
    assert DownstreamAdapter.objects.get().url_template.endswith("/idempotency/{key}")


def test_a_compensation_adapter_to_a_non_public_address_is_not_registered(
    staff_client: Client, tenant, create_order
) -> None:
    response = staff_client.post(
        "/admin/reconcile/compensationadapter/add/",
        {
            "tenant": tenant.pk,
            "tool": create_order.pk,
            "url_template": "http://169.254.169.254/orders/{order_id}/cancel",
            "success_statuses": "[200]",
            "timeout_seconds": "10",
        },
        secure=True,
    )
    assert response.status_code == 200
    assert "non-public address" in response.content.decode()
    assert not CompensationAdapter.objects.exists()


def test_every_admin_table_is_named_in_proper_english_plural() -> None:
    """Django's default plural adds an "s": "policys", "entrys". Each table the admin lists
    is named as a reader would write it."""
    wrong = [
        str(model._meta.verbose_name_plural)
        for model in admin.site._registry
        if re.search(r"[^aeiou]ys$|[^s]ss$|sss$", str(model._meta.verbose_name_plural))
    ]
    assert wrong == []
