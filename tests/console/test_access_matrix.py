"""Every console route against every role: allowed or 403, wrong method 405, CSRF enforced,
another tenant's object 404. The table is the console's access policy in one place."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client
from django.urls import reverse

from ledger.models import AuditEvent, IdempotencyRecord, LedgerEntry, Run, Tool
from tests.console.conftest import make_user, signed_in

pytestmark = pytest.mark.django_db

EVERYONE = {"operator", "approver", "manager", "none"}
STAFF = {"operator", "approver", "manager"}

# (url name, object the URL needs, methods it answers, roles allowed)
ROUTES = [
    ("home", None, {"GET"}, EVERYONE),
    ("switch_tenant", None, {"POST"}, EVERYONE),
    ("set_language", None, {"POST"}, EVERYONE),
    ("preferences", None, {"GET", "POST"}, EVERYONE),
    ("approvals", None, {"GET"}, {"approver"}),
    ("approval", "approval", {"GET"}, {"approver"}),
    ("approval_decide", "approval", {"POST"}, {"approver"}),
    ("unknown_calls", None, {"GET"}, {"operator"}),
    ("unknown_bulk", None, {"GET", "POST"}, {"operator"}),
    ("unknown_call", "record", {"GET"}, {"operator"}),
    ("unknown_action", "record", {"POST"}, {"operator"}),
    ("calls", None, {"GET"}, STAFF),
    ("runs", None, {"GET"}, STAFF),
    ("run", "run", {"GET"}, STAFF),
    ("call", "entry", {"GET"}, STAFF),
    ("call_by_id", "call_id", {"GET"}, STAFF),
    ("find", None, {"GET"}, EVERYONE),
    ("record", "record", {"GET"}, STAFF),
    ("combinations", None, {"GET"}, {"manager"}),
    ("combination", "combination", {"GET"}, {"manager"}),
    ("rollback", "combination", {"GET", "POST"}, {"manager"}),
    *(
        (f"combination_{change}", "combination", {"GET", "POST"}, {"manager"})
        for change in ("promote", "resume", "canary", "shadow", "unshadow", "halt", "retire")
    ),
    ("metrics", None, {"GET", "POST"}, {"manager"}),
    ("on_call", None, {"GET", "POST"}, {"manager"}),
    ("tools", None, {"GET"}, EVERYONE),
    ("tools_import", None, {"POST"}, {"manager"}),
    ("tool_override", "tool", {"POST"}, {"manager"}),
    ("tool_compensation", None, {"POST"}, {"manager"}),
    ("audit", None, {"GET"}, EVERYONE),
    ("audit_event", "event", {"GET"}, EVERYONE),
]
IDS = [route[0] for route in ROUTES]


@pytest.fixture
def objects(tenant, pending, unknown, combos) -> dict[str, Any]:
    entry = LedgerEntry.objects.filter(tenant=tenant).first()
    return {
        "approval": pending.pk,
        "record": unknown.pk,
        "run": Run.objects.filter(tenant=tenant).first().pk,
        "entry": entry.pk,
        "call_id": entry.call_id,
        "combination": combos[1].pk,
        "tool": Tool.objects.filter(tenant=tenant).first().pk,
        "event": AuditEvent.objects.filter(tenant=tenant).first().pk,
    }


#: Pages that need a query to find their object: its parameters, from the objects.
QUERIES = {"find": lambda objects: f"?id={objects['call_id']}"}


def _url(name: str, needs: str | None, objects: dict[str, Any]) -> str:
    parameter = "call_id" if needs == "call_id" else "pk"
    url = reverse(f"console:{name}", kwargs={parameter: objects[needs]} if needs else None)
    return url + QUERIES[name](objects) if name in QUERIES else url


def _request(client: Client, method: str, url: str, data: dict | None = None):
    if method == "GET":
        return client.get(url, secure=True)
    return client.post(url, data or {}, secure=True)


@pytest.mark.parametrize(("name", "needs", "methods", "allowed"), ROUTES, ids=IDS)
def test_roles_and_methods(django_user_model, tenant, objects, name, needs, methods, allowed):
    url = _url(name, needs, objects)
    for role in sorted(EVERYONE):
        client = signed_in(
            make_user(
                django_user_model, f"{name}-{role}", tenant, *([] if role == "none" else [role])
            )
        )
        for method in ("GET", "POST"):
            data = {"tenant": tenant.pk} if name == "switch_tenant" else None
            status = _request(client, method, url, data).status_code
            if method not in methods:
                assert status == 405, (role, method)
            elif role in allowed:
                assert status not in (403, 404, 405), (role, method)
            else:
                assert status == 403, (role, method)
    assert Client().get(url, secure=True).status_code == 302  # anonymous: to sign-in


POSTS = [route for route in ROUTES if "POST" in route[2]]


@pytest.mark.parametrize(("name", "needs", "methods", "allowed"), POSTS, ids=[r[0] for r in POSTS])
def test_csrf_is_enforced_on_every_post(
    django_user_model, tenant, objects, name, needs, methods, allowed
):
    client = Client(enforce_csrf_checks=True)
    client.force_login(make_user(django_user_model, "root", tenant, "admin"))
    assert client.post(_url(name, needs, objects), secure=True).status_code == 403


OBJECT_ROUTES = [route for route in ROUTES if route[1]]


@pytest.mark.parametrize(
    ("name", "needs", "methods", "allowed"), OBJECT_ROUTES, ids=[r[0] for r in OBJECT_ROUTES]
)
def test_another_tenants_object_is_a_404(
    django_user_model, other_tenant, objects, name, needs, methods, allowed
):
    them = signed_in(make_user(django_user_model, "them", other_tenant, "admin"))
    url = _url(name, needs, objects)
    for method in methods:
        assert _request(them, method, url).status_code == 404, method
    assert IdempotencyRecord.objects.get(pk=objects["record"]).state == "unknown"
