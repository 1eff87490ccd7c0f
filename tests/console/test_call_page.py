"""A page for every call: its redacted input, classification and rule, decision, the
observation the model gets, the action's record, look-ups, approvals and timeline; deep links
to it wherever a call is shown, and from the audit log to every target that has a page."""

from __future__ import annotations

import pytest

from ledger.models import IdempotencyRecord, LedgerEntry
from ledger.records import Outcome, resolve_unknown
from reconcile.services import reconcile_record
from tests.api.conftest import client_for
from tests.console.conftest import make_pending, make_user, signed_in

pytestmark = pytest.mark.django_db

SECRET = "sk-live-0123456789abcdefghijklmnop"


@pytest.fixture
def uncertain_order(tenant) -> LedgerEntry:
    """An order whose outcome is unknown, its input holding a secret, looked up once."""
    api = client_for(tenant)
    api.start_run("run-page")
    call = api.call(
        "create_order",
        {"cart": "cart-42", "api_key": SECRET},
        run_id="run-page",
        step_id="order",
        business_object_id="cart-42",
    ).json()
    api.post(f"/calls/{call['call_id']}/complete", {"fencing_token": 1, "outcome": "uncertain"})
    record = IdempotencyRecord.objects.get(key=call["idempotency_key"])
    reconcile_record(record.pk)  # no adapter: escalated, with one look-up attempt
    return LedgerEntry.objects.get(call_id=call["call_id"])


def test_the_call_page_shows_everything_about_the_call(django_user_model, tenant, uncertain_order):
    operator = signed_in(make_user(django_user_model, "op", tenant, "operator"))
    response = operator.get(f"/ledger/calls/{uncertain_order.pk}/", secure=True)
    assert response.status_code == 200
    html = response.content.decode()
    assert SECRET not in html and "cart-42" in html  # the input, redacted
    assert uncertain_order.classification_reason in html
    assert uncertain_order.classification_rule in html
    assert "SIDE_EFFECT_UNCERTAIN" in html  # what the model is told
    assert uncertain_order.idempotency_key in html and "unknown" in html
    assert "has no downstream adapter" in html  # the look-up
    assert "reconcile.escalated" in html or "reconcile.attempt" in html  # the timeline
    assert f'href="/ledger/runs/{uncertain_order.run_id}/#call-{uncertain_order.call_id}"' in html
    assert f'href="/unknown/{uncertain_order.record_id}/"' in html  # operators resolve it


def test_an_approver_sees_the_page_without_the_operators_links(
    django_user_model, tenant, uncertain_order
):
    approver = signed_in(make_user(django_user_model, "al", tenant, "approver"))
    html = approver.get(f"/ledger/calls/{uncertain_order.pk}/", secure=True).content.decode()
    assert f'href="/unknown/{uncertain_order.record_id}/"' not in html


def test_calls_link_to_their_page_from_the_list_and_the_run(
    django_user_model, tenant, uncertain_order
):
    operator = signed_in(make_user(django_user_model, "op", tenant, "operator"))
    link = f'href="/ledger/calls/{uncertain_order.pk}/"'
    assert link in operator.get("/ledger/", secure=True).content.decode()
    run_page = operator.get(f"/ledger/runs/{uncertain_order.run_id}/", secure=True)
    assert link in run_page.content.decode()
    unknown_page = operator.get(f"/unknown/{uncertain_order.record_id}/", secure=True)
    assert link in unknown_page.content.decode()


def test_audit_targets_link_to_their_pages_for_roles_that_open_them(
    django_user_model, tenant, uncertain_order
):
    from ledger import combinations

    combination, _ = combinations.create_combination(
        tenant=tenant,
        label="audited",
        actor="x",
        source="api",
        model="m",
        prompt="p",
        rules="r",
        tool_schema="t",
        data_version="d",
    )
    record = f'href="/ledger/records/{uncertain_order.record_id}/"'
    combination_link = f'href="/combinations/{combination.pk}/"'
    operator = signed_in(make_user(django_user_model, "op", tenant, "operator"))
    seen_by_operator = operator.get("/audit/", secure=True).content.decode()
    assert record in seen_by_operator and combination_link not in seen_by_operator
    manager = signed_in(make_user(django_user_model, "ma", tenant, "manager"))
    seen_by_manager = manager.get("/audit/", secure=True).content.decode()
    assert record in seen_by_manager and combination_link in seen_by_manager


def test_another_tenants_call_is_a_404(django_user_model, other_tenant, uncertain_order):
    them = signed_in(make_user(django_user_model, "them", other_tenant, "operator"))
    assert them.get(f"/ledger/calls/{uncertain_order.pk}/", secure=True).status_code == 404


def _section(html: str, section_id: str) -> str:
    start = html.index(f'id="{section_id}"')
    return html[start : html.index("</section>", start)]


def test_the_call_page_shows_what_the_model_was_told_then_and_what_a_retry_gets_now(
    django_user_model, tenant, uncertain_order
):
    """A duplicate told SIDE_EFFECT_UNCERTAIN keeps showing that after its record is settled;
    what a retry would get now is the recorded result, shown apart."""
    api = client_for(tenant)
    duplicate = api.call(
        "create_order",
        {"cart": "cart-42", "api_key": SECRET},
        run_id="run-page",
        step_id="order",
        business_object_id="cart-42",
    ).json()
    assert duplicate["observation"]["code"] == "SIDE_EFFECT_UNCERTAIN"
    resolve_unknown(
        record=uncertain_order.record,
        outcome=Outcome.SUCCEEDED,
        actor="worker",
        detail="found downstream",
        result={"order_id": "o-4242"},
    )
    operator = signed_in(make_user(django_user_model, "op", tenant, "operator"))
    entry = LedgerEntry.objects.get(call_id=duplicate["call_id"])
    html = operator.get(f"/ledger/calls/{entry.pk}/", secure=True).content.decode()
    told, retry = _section(html, "call-told"), _section(html, "call-retry")
    assert "SIDE_EFFECT_UNCERTAIN" in told and "o-4242" not in told
    assert "o-4242" in retry and "SIDE_EFFECT_UNCERTAIN" not in retry
    # The call that ran: told to go ahead, then SIDE_EFFECT_UNCERTAIN when it reported.
    html = operator.get(f"/ledger/calls/{uncertain_order.pk}/", secure=True).content.decode()
    told = _section(html, "call-told")
    assert "Go ahead" in told and "SIDE_EFFECT_UNCERTAIN" in told and "o-4242" not in told
    assert "o-4242" in _section(html, "call-retry")


def test_a_retrys_page_shows_its_actions_write_plan(django_user_model, tenant) -> None:
    """The replay of a conditional write is a call of its own without a plan; its page shows
    the plan its action was recorded with, as the action's page does."""
    approval = make_pending(tenant, "settings.py")
    retry = LedgerEntry.objects.get(record=approval.record, write_plan__isnull=True)
    operator = signed_in(make_user(django_user_model, "olga", tenant, "operator"))
    page = operator.get(f"/ledger/calls/{retry.pk}/", secure=True)
    assert page.context["plan"] == approval.record.write_plan
    assert "repo:settings.py" in page.content.decode()
