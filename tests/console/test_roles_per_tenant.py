"""Roles belong to memberships: a user's role is the one they hold in the tenant at hand."""

from __future__ import annotations

import importlib

import pytest
from django.apps import apps
from django.contrib.auth.models import Group
from django.core.management import call_command
from django.test import Client, RequestFactory, override_settings

from console.access import TENANT_SESSION_KEY
from console.demo import DEMO_USERS
from console.members import request_roles
from ledger.models import ApprovalRequest, AuditEvent, Membership
from ledger.permissions import Role
from tests.console.conftest import make_pending, make_user, signed_in

pytestmark = pytest.mark.django_db


def _in_tenant(client: Client, tenant) -> Client:
    session = client.session
    session[TENANT_SESSION_KEY] = tenant.pk
    session.save()
    return client


@pytest.fixture
def approver_in_a_operator_in_b(django_user_model, tenant, other_tenant):
    user = make_user(django_user_model, "pat", tenant, "approver")
    Membership.objects.create(user=user, tenant=other_tenant, role="operator")
    return user


def test_roles_are_read_in_the_current_tenant(approver_in_a_operator_in_b, tenant, other_tenant):
    request = RequestFactory().get("/")
    request.user = approver_in_a_operator_in_b
    assert request_roles(request, tenant) == {Role.APPROVER}
    assert request_roles(request, other_tenant) == {Role.OPERATOR}


def test_an_approver_in_a_who_is_an_operator_in_b_cannot_approve_in_b(
    approver_in_a_operator_in_b, tenant, other_tenant
):
    theirs = make_pending(other_tenant)
    client = _in_tenant(signed_in(approver_in_a_operator_in_b), other_tenant)
    assert client.get("/approvals/").status_code == 403
    assert client.get(f"/approvals/{theirs.pk}/").status_code == 403
    response = client.post(f"/approvals/{theirs.pk}/decide", {"decision": "approve"})
    assert response.status_code == 403
    assert ApprovalRequest.objects.get(pk=theirs.pk).state == "pending"
    denied = AuditEvent.objects.filter(actor="pat", outcome="denied", tenant=other_tenant)
    assert denied.exists()
    # The operator pages of B are theirs, and in A they approve.
    assert client.get("/unknown/").status_code == 200
    ours = make_pending(tenant, run_id="run-a")
    in_a = _in_tenant(signed_in(approver_in_a_operator_in_b), tenant)
    assert in_a.post(f"/approvals/{ours.pk}/decide", {"decision": "approve"}).status_code == 302
    assert ApprovalRequest.objects.get(pk=ours.pk).state == "approved"


def test_the_navigation_shows_the_roles_of_the_current_tenant(
    approver_in_a_operator_in_b, tenant, other_tenant
):
    in_b = _in_tenant(signed_in(approver_in_a_operator_in_b), other_tenant).get("/")
    assert in_b.context["roles"] == {"operator"}
    in_a = _in_tenant(signed_in(approver_in_a_operator_in_b), tenant).get("/")
    assert in_a.context["roles"] == {"approver"}


def test_seed_demo_gives_each_demo_user_the_role_of_its_name() -> None:
    with override_settings(DEBUG=True):
        call_command("seed_demo")
    roles = dict(Membership.objects.values_list("user__username", "role"))
    assert roles == {name: name for name in DEMO_USERS}


class _MembershipsWhereTheyLiveNow:
    """The app registry as the data migration asks it, answering with the model its rows live
    in now (the ledger's memberships, whose table the migration's own state names otherwise)."""

    def get_model(self, app_label: str, model_name: str) -> type:
        if (app_label, model_name) == ("console", "Membership"):
            return Membership
        return apps.get_model(app_label, model_name)


def test_the_data_migration_turns_role_groups_into_membership_roles(
    django_user_model, tenant, other_tenant
):
    migration = importlib.import_module("console.migrations.0004_membership_roles")
    both = django_user_model.objects.create_user("both")
    both.groups.add(Group.objects.get_or_create(name="approver")[0])
    both.groups.add(Group.objects.get_or_create(name="operator")[0])
    root = django_user_model.objects.create_user("root", is_superuser=True)
    plain = django_user_model.objects.create_user("plain")
    for user in (both, root, plain):
        Membership.objects.create(user=user, tenant=tenant)
    Membership.objects.create(user=both, tenant=other_tenant)
    migration.roles_from_groups(_MembershipsWhereTheyLiveNow(), None)
    roles = {(m.user.username, m.tenant.slug): m.role for m in Membership.objects.all()}
    assert roles == {
        ("both", "acme"): "approver",
        ("both", "globex"): "approver",
        ("root", "acme"): "admin",
        ("plain", "acme"): "",
    }
