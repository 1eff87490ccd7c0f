"""Bulk actions on unknown calls: a frozen selection, a dry-run summary, then exactly that."""

from __future__ import annotations

import pytest

from ledger.models import AuditEvent, IdempotencyRecord
from ledger.records import Outcome, resolve_unknown
from tests.api.conftest import client_for
from tests.console.conftest import make_user, signed_in

pytestmark = pytest.mark.django_db


@pytest.fixture
def unknowns(tenant) -> list[IdempotencyRecord]:
    api = client_for(tenant)
    api.start_run()
    for n in range(3):
        first = api.call("create_order", {"cart": n}, business_object_id=f"c{n}").json()
        api.post(
            f"/calls/{first['call_id']}/complete", {"fencing_token": 1, "outcome": "uncertain"}
        )
    return list(IdempotencyRecord.objects.order_by("pk"))


@pytest.fixture
def operator(django_user_model, tenant):
    return signed_in(make_user(django_user_model, "op", tenant, "operator"))


def _ids(records) -> list[str]:
    return [str(r.pk) for r in records]


def test_the_preview_changes_nothing_and_lists_the_selection(operator, unknowns):
    picked = unknowns[:2]
    before = AuditEvent.objects.count()
    page = operator.get(
        "/unknown/bulk", {"ids": _ids(picked), "action": "failed", "note": "no order"}, secure=True
    )
    assert page.status_code == 200
    assert [item.record.pk for item in page.context["items"]] == [r.pk for r in picked]
    assert page.context["ready"] == 2
    assert "Dry run: nothing has changed" in page.content.decode()
    assert AuditEvent.objects.count() == before
    assert set(IdempotencyRecord.objects.values_list("state", flat=True)) == {"unknown"}


def test_confirming_acts_on_exactly_the_frozen_selection(operator, unknowns):
    picked, left_alone = unknowns[:2], unknowns[2]
    # One of the selection is settled by a look-up between the preview and the confirmation.
    resolve_unknown(
        record=picked[0], outcome=Outcome.SUCCEEDED, actor="worker", detail="found", result={}
    )
    response = operator.post(
        "/unknown/bulk",
        {"ids": _ids(picked), "action": "failed", "note": "shop has no such order"},
        secure=True,
        follow=True,
    )
    html = response.content.decode()
    assert "done for 1 of 2 selected calls" in html
    assert "Skipped" in html and picked[0].key in html
    states = {r.pk: r.state for r in IdempotencyRecord.objects.all()}
    assert states == {
        picked[0].pk: "succeeded",
        picked[1].pk: "failed_final",
        left_alone.pk: "unknown",
    }
    assert AuditEvent.objects.filter(action="record.resolved_failed_final", actor="op").count() == 1


def test_bulk_escalate_and_lookup(operator, unknowns):
    operator.post(
        "/unknown/bulk",
        {"ids": _ids(unknowns), "action": "escalate", "note": "vendor down"},
        secure=True,
    )
    assert all(r.escalated_at for r in IdempotencyRecord.objects.all())
    operator.post("/unknown/bulk", {"ids": _ids(unknowns), "action": "lookup"}, secure=True)
    assert not any(r.escalated_at for r in IdempotencyRecord.objects.all())


@pytest.mark.parametrize(
    "params",
    [
        {"action": "failed", "note": "x"},  # nothing selected
        {"ids": ["1x"], "action": "lookup"},  # malformed
        {"ids": ["IDS"], "action": "succeeded", "note": "x"},  # not allowed in bulk
        {"ids": ["IDS"], "action": "failed"},  # no reason
        {"ids": ["IDS"], "action": "nuke"},
    ],
)
def test_bad_bulk_requests_are_refused_and_change_nothing(operator, unknowns, params):
    params = {k: (_ids(unknowns) if v == ["IDS"] else v) for k, v in params.items()}
    before = AuditEvent.objects.count()
    assert operator.get("/unknown/bulk", params, secure=True).status_code == 400
    assert operator.post("/unknown/bulk", params, secure=True).status_code == 400
    assert AuditEvent.objects.count() == before
    assert set(IdempotencyRecord.objects.values_list("state", flat=True)) == {"unknown"}


def test_a_selection_with_another_tenants_call_changes_nothing(
    django_user_model, other_tenant, unknowns
):
    them = signed_in(make_user(django_user_model, "them", other_tenant, "operator"))
    response = them.post(
        "/unknown/bulk", {"ids": _ids(unknowns), "action": "failed", "note": "x"}, secure=True
    )
    assert response.status_code == 400
    assert set(IdempotencyRecord.objects.values_list("state", flat=True)) == {"unknown"}


def test_bulk_needs_the_operator_role_and_csrf(django_user_model, tenant, unknowns):
    approver = signed_in(make_user(django_user_model, "ap", tenant, "approver"))
    params = {"ids": _ids(unknowns), "action": "lookup"}
    assert approver.get("/unknown/bulk", params, secure=True).status_code == 403
    from django.test import Client

    strict = Client(enforce_csrf_checks=True)
    strict.force_login(make_user(django_user_model, "op2", tenant, "operator"))
    assert strict.post("/unknown/bulk", params, secure=True).status_code == 403
    assert not AuditEvent.objects.filter(action="reconcile.lookup_requested").exists()


def test_the_queue_is_paged_oldest_first(operator, unknowns, monkeypatch):
    from console import unknown

    monkeypatch.setattr(unknown, "PAGE", 2)
    first = operator.get("/unknown/", secure=True)
    assert [r.pk for r in first.context["records"]] == [r.pk for r in unknowns[:2]]
    after = first.context["next_after"]
    assert after == unknowns[1].pk
    second = operator.get("/unknown/", {"after": after}, secure=True)
    assert [r.pk for r in second.context["records"]] == [unknowns[2].pk]
    assert second.context["next_after"] is None
    resolve_unknown(
        record=unknowns[1], outcome=Outcome.FAILED, actor="w", detail="gone", error={"code": "X"}
    )
    stale = operator.get("/unknown/", {"after": after}, secure=True, follow=True)
    assert "no longer unknown" in stale.content.decode()


def test_a_bulk_form_error_is_shown_on_the_queue_keeping_what_was_filled_in(operator, unknowns):
    picked = unknowns[:2]
    response = operator.get(
        "/unknown/bulk", {"ids": _ids(picked), "action": "escalate", "note": ""}, secure=True
    )
    assert response.status_code == 400
    html = response.content.decode()
    assert (
        'id="bulk-error" role="alert" tabindex="-1" autofocus data-focus>'
        "This action needs a reason" in html
    )
    for record in picked:
        assert f'value="{record.pk}" id="pick-{record.pk}" checked' in html
    assert f'value="{unknowns[2].pk}" id="pick-{unknowns[2].pk}" aria-label' in html  # unticked
    assert '<option value="escalate" selected>' in html


def test_a_bulk_form_with_nothing_ticked_keeps_the_reason(operator, unknowns):
    response = operator.get(
        "/unknown/bulk", {"action": "failed", "note": "no such order"}, secure=True
    )
    assert response.status_code == 400
    html = response.content.decode()
    assert "Select at least one call." in html and 'value="no such order"' in html
    assert all(
        r.state == "unknown"
        for r in type(unknowns[0]).objects.filter(pk__in=[u.pk for u in unknowns])
    )


def test_a_bulk_form_errors_page_filters_and_exports_the_queue(operator, unknowns):
    """The queue shown again at /unknown/bulk: its filters and its export go to /unknown/."""
    response = operator.get("/unknown/bulk", {"action": "failed", "note": ""}, secure=True)
    html = response.content.decode()
    assert '<form method="get" action="/unknown/" class="filters"' in html
    assert 'href="/unknown/?format=csv"' in html
