"""The console's compensation pages: roles, tenants, declarations, and what they show."""

from __future__ import annotations

import re

import pytest

from ledger.models import (
    ApprovalRequest,
    AuditEvent,
    Compensation,
    DeclaredCompensation,
    IdempotencyRecord,
    Run,
)
from reconcile.compensations import declare_compensation
from tests.api.conftest import ApiClient, client_for
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


# --- where a compensation is offered ---------------------------------------------------------


def _succeeded(api: ApiClient, tool: str, step: str, result: dict) -> IdempotencyRecord:
    call = api.call(tool, {"step": step}, step_id=step).json()
    done = api.post(
        f"/calls/{call['call_id']}/complete",
        {"fencing_token": 1, "outcome": "succeeded", "result": result},
    )
    assert done.status_code == 200, done.content
    return IdempotencyRecord.objects.get(key=call["idempotency_key"])


def test_only_an_action_that_can_be_compensated_links_to_it(
    django_user_model, tenant, ordered
) -> None:
    """``ordered`` has a compensation with an adapter; a read (even one whose tool declares a
    compensation), an action without a declaration and one whose compensating tool has no
    adapter have none to offer."""
    api = client_for(tenant)
    declare_compensation(
        tool=make_tool(tenant, "read_file"),
        compensating_tool="cancel_order",
        arguments={"order_id": "result.id"},
        actor="test",
        source="system",
    )
    declare_compensation(
        tool=make_tool(tenant, "send_email"),
        compensating_tool=make_tool(tenant, "recall_email").name,
        arguments={"message_id": "result.id"},
        actor="test",
        source="system",
    )
    read = _succeeded(api, "read_file", "s-read", {"id": "ord_2"})
    charge = _succeeded(api, "charge_customer", "s-charge", {"id": "ch_1"})
    mail = _succeeded(api, "send_email", "s-mail", {"id": "msg_1"})
    olga = signed_in(make_user(django_user_model, "olga", tenant, "operator"))
    run_page = olga.get(f"/ledger/runs/{ordered.run_id}/").content.decode()
    assert f"/compensations/records/{ordered.pk}/" in run_page
    assert f"/compensations/runs/{ordered.run_id}/" in run_page  # the saga
    for none in (read, charge, mail):
        assert f"/compensations/records/{none.pk}/" not in run_page
        record_page = olga.get(f"/ledger/records/{none.pk}/").content.decode()
        assert f"/compensations/records/{none.pk}/" not in record_page
    record_page = olga.get(f"/ledger/records/{ordered.pk}/").content.decode()
    assert f"/compensations/records/{ordered.pk}/" in record_page


def test_a_run_with_nothing_to_compensate_says_why_once(django_user_model, tenant) -> None:
    api = client_for(tenant)
    api.start_run()
    _succeeded(api, "charge_customer", "s-charge", {"id": "ch_1"})
    _succeeded(api, "send_email", "s-mail", {"id": "msg_1"})
    _succeeded(api, "read_file", "s-read", {"text": "x"})
    olga = signed_in(make_user(django_user_model, "olga", tenant, "operator"))
    run = Run.objects.get(run_id="run-1")
    page = olga.get(f"/ledger/runs/{run.pk}/").content.decode()
    assert "/compensations/" not in page
    assert page.count("can be compensated") == 1


# --- the compensation's request, approval and state ------------------------------------------


def _state_of(page: str) -> str:
    found = re.search(r'<span class="badge" id="compensation-state">(.*?)</span>', page)
    return found.group(1) if found else ""


def test_the_compensation_shows_no_outcome_before_anyone_approved(
    django_user_model, tenant, ordered
) -> None:
    olga = signed_in(make_user(django_user_model, "olga", tenant, "operator"))
    alice = signed_in(make_user(django_user_model, "alice", tenant, "approver"))
    olga.post(f"/compensations/records/{ordered.pk}/request")
    page = alice.get(f"/compensations/records/{ordered.pk}/").content.decode()
    assert "Compensated by" not in page and _state_of(page) == "awaiting approval"
    assert "Ask again" not in page  # it waits on an approver: there is nothing to ask again
    alice.post(
        f"/compensations/records/{ordered.pk}/decide", {"decision": "approve", "reason": "dup"}
    )
    page = alice.get(f"/compensations/records/{ordered.pk}/").content.decode()
    assert "Compensated by" not in page and _state_of(page) == "approved; a worker sends it"
    assert "Ask again" not in page
    record_page = olga.get(f"/ledger/records/{ordered.pk}/").content.decode()
    assert "approved; a worker sends it" in record_page and ">reserved<" not in record_page


def test_the_requester_gives_a_reason_the_approver_reads_redacted(
    django_user_model, tenant, ordered
) -> None:
    secret = "sk_live_0123456789abcdef"  # planted, to be redacted
    olga = signed_in(make_user(django_user_model, "olga", tenant, "operator"))
    olga.post(
        f"/compensations/records/{ordered.pk}/request",
        {"reason": f"a duplicate of order 7; token={secret}"},
    )
    compensation = Compensation.objects.get(original=ordered)
    assert "a duplicate of order 7" in compensation.reason and secret not in compensation.reason
    approval = ApprovalRequest.objects.get(record__key=compensation.key)
    alice = signed_in(make_user(django_user_model, "alice", tenant, "approver"))
    for url in (f"/compensations/records/{ordered.pk}/", f"/approvals/{approval.pk}/"):
        page = alice.get(url).content.decode()
        assert "a duplicate of order 7" in page and secret not in page, url
    requested = AuditEvent.objects.get(action="compensation.requested")
    assert "a duplicate of order 7" in requested.detail and secret not in requested.detail


def test_the_compensation_approval_says_a_worker_sends_it(
    django_user_model, tenant, ordered
) -> None:
    signed_in(make_user(django_user_model, "olga", tenant, "operator")).post(
        f"/compensations/records/{ordered.pk}/request"
    )
    approval = ApprovalRequest.objects.get(record__key=f"{ordered.key}:compensate")
    alice = signed_in(make_user(django_user_model, "alice", tenant, "approver"))
    page = alice.get(f"/approvals/{approval.pk}/").content.decode()
    assert "the model reads it" not in page and "tells the model" not in page
    assert "a worker sends" in page
    rejected = alice.post(
        f"/approvals/{approval.pk}/decide",
        {"decision": "reject", "reason": "not a duplicate"},
        follow=True,
    ).content.decode()
    assert ": rejected." in rejected and "the model is told why" not in rejected
