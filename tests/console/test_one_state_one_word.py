"""One state, one word: a page never says two things of one state. An approval that can no
longer be given reads as expired (or invalidated), never "pending", and offers no decision; a
settled call is not shown as escalated; the inbox's counts do not overlap unsaid."""

from __future__ import annotations

import re

import pytest
from django.db.models.functions import Now

from ledger.models import ApprovalRequest, IdempotencyRecord, Run, Tenant
from ledger.records import Outcome, resolve_unknown
from reconcile import operator_actions
from tests.console.conftest import make_user, signed_in

pytestmark = pytest.mark.django_db


def _badges(html: str) -> list[str]:
    return re.findall(r'<span class="badge[^"]*"[^>]*>([^<]+)</span>', html)


def test_an_expired_approval_reads_expired_and_offers_no_decision(
    django_user_model, tenant: Tenant, pending: ApprovalRequest
) -> None:
    ApprovalRequest.objects.filter(pk=pending.pk).update(expires_at=Now())
    approver = signed_in(make_user(django_user_model, "ann", tenant, "approver"))
    page = approver.get(f"/approvals/{pending.pk}/").content.decode()
    assert "expired" in _badges(page) and "pending" not in _badges(page)
    assert "can no longer be given" in page
    assert 'value="approve"' not in page and 'value="reject"' not in page
    record_page = approver.get(f"/ledger/records/{pending.record_id}/").content.decode()
    assert "pending" not in _badges(record_page) and "expired" in _badges(record_page)


def test_a_pending_approval_whose_run_was_halted_reads_invalidated(
    django_user_model, tenant: Tenant, pending: ApprovalRequest
) -> None:
    Run.objects.filter(pk=pending.entry.run_id).update(
        status=Run.Status.HALTED, termination_reason="stopped by hand", finished_at=Now()
    )
    assert ApprovalRequest.objects.get(pk=pending.pk).state == "pending"  # as stored
    approver = signed_in(make_user(django_user_model, "ann", tenant, "approver"))
    page = approver.get(f"/approvals/{pending.pk}/").content.decode()
    assert "invalidated" in _badges(page) and "pending" not in _badges(page)
    assert "stopped by hand" in page and 'value="approve"' not in page


def test_a_settled_call_is_not_shown_as_escalated(
    django_user_model, tenant: Tenant, unknown: IdempotencyRecord
) -> None:
    operator_actions.escalate(record=unknown, actor="olga", reason="the shop is down")
    olga = signed_in(make_user(django_user_model, "olga", tenant, "operator"))
    assert "Escalated to a human" in olga.get(f"/unknown/{unknown.pk}/").content.decode()
    resolve_unknown(
        record=unknown,
        outcome=Outcome.SUCCEEDED,
        actor="olga",
        source="console",
        detail="found it",
        result={"evidence": "found it"},
    )
    page = olga.get(f"/unknown/{unknown.pk}/").content.decode()
    assert "Escalated to a human" not in page
    assert "succeeded" in _badges(page) and "nothing is left to resolve" in page


def test_the_inbox_says_its_write_conflicts_are_among_its_unknown_calls(
    django_user_model, tenant: Tenant, unknown: IdempotencyRecord
) -> None:
    IdempotencyRecord.objects.filter(pk=unknown.pk).update(
        escalated_at=Now(), escalation_kind="write_conflict", escalation_reason="changed"
    )
    page = signed_in(make_user(django_user_model, "olga", tenant, "operator")).get("/")
    tiles = re.findall(
        r'<span class="count">(\d+)</span>\s*<span class="label">([^<]+)</span>',
        page.content.decode(),
    )
    assert ("1", "calls with unknown outcome") in tiles
    assert ("1", "of them write conflicts") in tiles


def test_the_resolve_buttons_follow_what_is_known_of_the_call(
    django_user_model, tenant: Tenant
) -> None:
    """A write whose file check found it did not land makes "did not happen" the default, not
    "succeeded"; an escalated call offers no second escalation."""
    from tests.console.conftest import make_pending

    pending = make_pending(tenant)
    olga = signed_in(make_user(django_user_model, "olga", tenant, "operator"))
    page = olga.get(f"/unknown/{pending.record_id}/").content.decode()
    assert 'value="failed" class="primary"' in page
    assert 'value="succeeded" class="primary"' not in page
    assert 'value="escalate"' not in page
