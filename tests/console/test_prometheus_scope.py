"""/metrics shows each reader the tenants it may see: the scraper's token every tenant, a
signed-in user the tenants they administer, anyone else nothing (a 401, kept as a denial in the
security log). Two tenants with calls, combinations, unknown outcomes and approvals of their
own: one tenant's admin never reads the other's labels, tool names or counters."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.test import Client
from prometheus_client.parser import text_string_to_metric_families

from console.models import SecurityEvent
from ledger import combinations
from ledger.models import Membership, Tenant
from ledger.services import metrics
from tests.api.conftest import client_for
from tests.console.conftest import make_pending, make_user, signed_in
from tests.factories import make_tool

pytestmark = pytest.mark.django_db

TOKEN = "scrape-secret"


def _activity(tenant: Tenant) -> None:
    """Counted calls under an active combination, an unknown outcome and a pending approval,
    each named after the tenant."""
    combination, _ = combinations.create_combination(
        tenant=tenant,
        label=f"{tenant.slug}-combo",
        actor="t",
        source="api",
        model="m",
        prompt="p",
        rules="r",
        tool_schema="t",
        data_version="d",
    )
    combinations.activate(tenant=tenant, combination_id=combination.pk, actor="t", source="api")
    api = client_for(tenant)
    api.start_run(f"{tenant.slug}-run")
    for n in range(3 if tenant.slug == "acme" else 7):
        answer = api.call(
            "create_order",
            {"cart": n},
            run_id=f"{tenant.slug}-run",
            business_object_id=f"{tenant.slug}-cart-{n}",
        ).json()
        api.post(
            f"/calls/{answer['call_id']}/complete", {"fencing_token": 1, "outcome": "uncertain"}
        )
    make_tool(tenant, f"{tenant.slug}_lookup_tool")
    api.call(f"{tenant.slug}_lookup_tool", {"q": 1}, run_id=f"{tenant.slug}-run", step_id="s-9")
    make_pending(tenant, run_id=f"{tenant.slug}-write")


@pytest.fixture
def both(tenant: Tenant, other_tenant: Tenant) -> tuple[Tenant, Tenant]:
    _activity(tenant)
    _activity(other_tenant)
    metrics.roll_up()
    return tenant, other_tenant


def _scrape(client: Client, **headers: str) -> Any:
    return client.get("/metrics", secure=True, headers=headers)


def _samples(response: Any) -> list[Any]:
    assert response.status_code == 200, response.content
    families = text_string_to_metric_families(response.content.decode())
    return [sample for family in families for sample in family.samples]


def _tenants_in(response: Any) -> set[str]:
    return {s.labels["tenant"] for s in _samples(response) if "tenant" in s.labels}


def test_the_scrapers_token_sees_every_tenant(both, settings) -> None:
    settings.METRICS_TOKEN = TOKEN
    response = _scrape(Client(), Authorization=f"Bearer {TOKEN}")
    assert _tenants_in(response) == {"acme", "globex"}


def test_a_tenant_admin_sees_only_the_tenant_they_administer(both, django_user_model) -> None:
    ours, _theirs = both
    admin = signed_in(make_user(django_user_model, "alice", ours, "admin"))
    response = _scrape(admin)
    page = response.content.decode()
    assert _tenants_in(response) == {"acme"}
    # Nothing of the other tenant: its combination's label, its tools, its counters.
    assert "globex" not in page
    assert "globex_lookup_tool" not in page and "globex-combo" not in page
    keyed = {
        s.labels["tool"]: s.value
        for s in _samples(response)
        if s.name == "agent_ledger_keyed_requests_total"
    }
    assert keyed["create_order"] == 3  # acme's three, not globex's seven with them
    assert "acme-combo" in page and "acme_lookup_tool" in page


def test_an_admin_of_both_tenants_sees_both(both, django_user_model) -> None:
    ours, theirs = both
    user = make_user(django_user_model, "root", ours, "admin")
    Membership.objects.create(user=user, tenant=theirs, role="admin")
    assert _tenants_in(_scrape(signed_in(user))) == {"acme", "globex"}


def test_an_admin_elsewhere_sees_only_where_they_are_admin(both, django_user_model) -> None:
    ours, theirs = both
    user = make_user(django_user_model, "olga", ours, "operator")
    Membership.objects.create(user=user, tenant=theirs, role="admin")
    assert _tenants_in(_scrape(signed_in(user))) == {"globex"}


@pytest.mark.parametrize("role", ["", "operator", "approver", "manager"])
def test_a_member_who_administers_no_tenant_is_refused_and_the_refusal_kept(
    both, django_user_model, role
) -> None:
    ours, _theirs = both
    user = make_user(django_user_model, "mallory", ours, role)
    user.is_staff = True  # staff status alone opens no tenant's metrics
    user.save()
    response = _scrape(signed_in(user))
    assert response.status_code == 401
    assert b"acme" not in response.content
    [event] = SecurityEvent.objects.filter(actor="mallory")
    assert (event.reason, event.target_id) == ("role", "/metrics")


def test_an_anonymous_scrape_is_refused_and_kept(both, settings) -> None:
    settings.METRICS_TOKEN = TOKEN
    assert _scrape(Client()).status_code == 401
    assert _scrape(Client(), Authorization="Bearer wrong").status_code == 401
    events = SecurityEvent.objects.filter(target_id="/metrics")
    assert [e.reason for e in events] == ["unauthenticated", "unauthenticated"]
    assert all(e.actor.startswith("address:") for e in events)


def test_a_superuser_who_is_a_member_of_no_tenant_sees_every_tenant(both) -> None:
    """The installation's admin administers every tenant (``console.members``)."""
    root = get_user_model().objects.create_superuser("root", "root@example.com", "pw-123456789")
    assert _tenants_in(_scrape(signed_in(root))) == {"acme", "globex"}
