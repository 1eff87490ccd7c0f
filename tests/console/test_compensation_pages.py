"""The console's compensation pages: roles, tenants, declarations, and what they show."""

from __future__ import annotations

import pytest

from ledger.models import AuditEvent, DeclaredCompensation
from tests.console.conftest import make_user, signed_in
from tests.factories import make_tool

pytestmark = pytest.mark.django_db


def test_the_page_previews_the_exact_call_escaped(django_user_model, tenant, ordered) -> None:
    page = signed_in(make_user(django_user_model, "olga", tenant, "operator")).get(
        f"/compensations/records/{ordered.pk}/"
    )
    assert page.status_code == 200
    html = page.content.decode()
    assert "ord_&lt;b&gt;1&lt;/b&gt;" in html and "<b>1</b>" not in html
    assert "ord_%3Cb%3E1%3C%2Fb%3E/cancel" in html
    assert f"{ordered.key}:compensate" in html


def test_a_manager_or_nobody_cannot_use_the_pages(django_user_model, tenant, ordered) -> None:
    for role in ("manager", ""):
        client = signed_in(make_user(django_user_model, f"user-{role}", tenant, role))
        assert client.get(f"/compensations/records/{ordered.pk}/").status_code == 403
        assert client.post(f"/compensations/records/{ordered.pk}/request").status_code == 403
    assert not AuditEvent.objects.filter(action="compensation.requested").exists()


def test_another_tenants_action_is_not_found(
    django_user_model, tenant, other_tenant, ordered
) -> None:
    outsider = signed_in(make_user(django_user_model, "eve", other_tenant, "approver"))
    assert outsider.get(f"/compensations/records/{ordered.pk}/").status_code == 404
    assert outsider.post(f"/compensations/records/{ordered.pk}/request").status_code == 404
    assert outsider.get(f"/compensations/runs/{ordered.run_id}/").status_code == 404
    assert not AuditEvent.objects.filter(action="compensation.requested").exists()


def test_get_is_not_allowed_for_the_actions(django_user_model, tenant, ordered) -> None:
    client = signed_in(make_user(django_user_model, "alice", tenant, "approver"))
    assert client.get(f"/compensations/records/{ordered.pk}/decide").status_code == 405
    assert client.get(f"/compensations/runs/{ordered.run_id}/request").status_code == 405


def test_a_manager_declares_a_compensation_on_the_tools_page(
    django_user_model, tenant, settings
) -> None:
    settings.LEDGER_OUTBOUND_ALLOW_PRIVATE = True
    make_tool(tenant, "charge_customer")
    make_tool(tenant, "refund")
    manager = signed_in(make_user(django_user_model, "mia", tenant, "manager"))
    saved = manager.post(
        "/tools/compensation",
        {
            "tool": "charge_customer",
            "compensating_tool": "refund",
            "arguments": '{"charge": "result.id"}',  # the API's JSON is taken as it is
            "url_template": "http://127.0.0.1:9/charges/{charge}/refund",
            "success_statuses": "201",
        },
    )
    assert saved.status_code == 302
    declared = DeclaredCompensation.objects.get(tool__name="charge_customer")
    assert declared.arguments == {"charge": "result.id"} and declared.declared_by == "mia"
    assert AuditEvent.objects.get(action="compensation.declared").source == "console"
    assert "charge = result.id" in manager.get("/tools/").content.decode()


@pytest.mark.parametrize("arguments", ["not json", '{"charge": "id"}', "[]"])
def test_a_bad_declaration_changes_nothing(django_user_model, tenant, arguments: str) -> None:
    make_tool(tenant, "charge_customer")
    make_tool(tenant, "refund")
    manager = signed_in(make_user(django_user_model, "mia", tenant, "manager"))
    manager.post(
        "/tools/compensation",
        {"tool": "charge_customer", "compensating_tool": "refund", "arguments": arguments},
    )
    assert not DeclaredCompensation.objects.exists()


def test_an_operator_cannot_declare(django_user_model, tenant) -> None:
    make_tool(tenant, "charge_customer")
    make_tool(tenant, "refund")
    operator = signed_in(make_user(django_user_model, "olga", tenant, "operator"))
    answer = operator.post(
        "/tools/compensation",
        {
            "tool": "charge_customer",
            "compensating_tool": "refund",
            "arguments": '{"c": "result.id"}',
        },
    )
    assert answer.status_code == 403
    assert not DeclaredCompensation.objects.exists()
