"""The audit log and the approvals queue filter by time as the ledger does, with the same
control (console.filters.TimeRangeForm): the last hour, six hours, day or week by the database's
clock, or From / To with the browser's date and time picker; every filter stays in the URL."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.db.models.functions import Now
from django.utils import timezone

from ledger.models import ApprovalRequest
from ledger.services.audit import audit
from tests.console.conftest import make_pending, make_user, signed_in

pytestmark = pytest.mark.django_db


@pytest.fixture
def approver(django_user_model, tenant):
    return signed_in(make_user(django_user_model, "ann", tenant, "approver"))


@pytest.fixture
def operator(django_user_model, tenant):
    return signed_in(make_user(django_user_model, "olga", tenant, "operator"))


@pytest.fixture
def approvals(tenant) -> dict[str, ApprovalRequest]:
    """A write requested now and one requested three hours ago."""
    recent = make_pending(tenant, "recent.py", "run-recent")
    old = make_pending(tenant, "old.py", "run-old")
    ApprovalRequest.objects.filter(pk=old.pk).update(created_at=Now() - timedelta(hours=3))
    return {"recent": recent, "old": old}


def _approvals(client, query: dict[str, str]) -> set[int]:
    response = client.get("/approvals/", query, secure=True)
    assert response.status_code == 200, response.content[:300]
    return {approval.pk for approval, *_ in response.context["approvals"]}


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ({}, {"recent", "old"}),
        ({"range": "1h"}, {"recent"}),
        ({"range": "6h"}, {"recent", "old"}),
        ({"tool": "write"}, {"recent", "old"}),  # any part of the tool's name
        ({"tool": "read"}, set()),
    ],
)
def test_the_approvals_queue_filters_by_time_and_tool(approver, approvals, query, expected):
    assert _approvals(approver, query) == {approvals[name].pk for name in expected}


def test_the_approvals_queue_takes_an_absolute_range(approver, approvals):
    now = timezone.localtime()
    since = (now - timedelta(hours=4)).strftime("%Y-%m-%dT%H:%M")
    until = (now - timedelta(hours=2)).strftime("%Y-%m-%dT%H:%M")
    assert _approvals(approver, {"since": since, "until": until}) == {approvals["old"].pk}


def test_a_relative_and_an_absolute_range_together_are_an_error(approver, approvals):
    response = approver.get("/approvals/", {"range": "1h", "since": "2020-01-01"}, secure=True)
    assert response.status_code == 400
    assert "not both" in response.content.decode()


def test_the_time_control_is_the_ledgers(approver, operator):
    """The same fields, choices and picker on the three lists."""
    pages = {
        path: client.get(path, secure=True).content.decode()
        for client, path in (
            (approver, "/approvals/"),
            (operator, "/audit/"),
            (operator, "/ledger/"),
        )
    }
    for html in pages.values():
        assert html.count('type="datetime-local"') == 2
        for value in ("1h", "6h", "24h", "7d"):
            assert f'<option value="{value}">' in html


def _events(client, query: dict[str, str]) -> set[str]:
    response = client.get("/audit/", query, secure=True)
    assert response.status_code == 200, response.content[:300]
    return {event.action for event in response.context["events"]}


@pytest.fixture
def events(tenant, approvals) -> None:
    target = approvals["recent"]
    audit(tenant=tenant, actor="ann", action="test.recent", target=target, source="console")
    # The log is append-only (and its time set on insert): an event of two days ago is
    # written as it would have been then.
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO ledger_auditevent (tenant_id, actor, action, target_type, target_id,"
            " source, outcome, detail, created_at) VALUES (%s, 'bob', 'test.old',"
            " 'approvalrequest', %s, 'console', 'success', '', now() - interval '2 days')",
            [tenant.pk, str(target.pk)],
        )


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ({"action": "test."}, {"test.recent", "test.old"}),
        ({"action": "test.", "range": "24h"}, {"test.recent"}),
        ({"action": "test.", "range": "7d"}, {"test.recent", "test.old"}),
        ({"action": "test.", "actor": "bo"}, {"test.old"}),
    ],
)
def test_the_audit_log_filters_by_time(operator, events, query, expected):
    assert _events(operator, query) == expected


def test_the_audit_logs_next_page_keeps_the_filters(operator, tenant, approvals, monkeypatch):
    monkeypatch.setattr("console.views.PAGE_SIZE", 1)
    for n in range(3):
        audit(tenant=tenant, actor="x", action=f"test.{n}", target=approvals["old"], source="api")
    html = operator.get("/audit/", {"action": "test.", "range": "1h"}, secure=True).content
    assert b"?action=test.&amp;range=1h&amp;before=" in html
    assert b"action=test.&amp;range=1h&amp;format=csv" in html
