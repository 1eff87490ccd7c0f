"""The approval page: what the approver sees before deciding, and that a decision can no longer
be given once the approval's combination or run is halted."""

from __future__ import annotations

import pytest
from django.utils import timezone

from ledger import combinations
from ledger.models import ApprovalRequest, AuditEvent
from tests.console.conftest import make_pending, make_user, sha, signed_in

pytestmark = pytest.mark.django_db


def test_a_halted_combinations_pending_approval_is_void(django_user_model, tenant, combos):
    _good, bad = combos
    approval = make_pending(tenant)  # planned under the active (bad) combination
    assert approval.entry.combination_id == bad.pk
    combinations.halt(
        tenant=tenant, combination_id=bad.pk, actor="maria", source="console", reason="dups"
    )
    approval.refresh_from_db()
    assert approval.state == "invalidated"
    assert AuditEvent.objects.filter(
        action="approval.invalidated", target_id=str(approval.pk)
    ).exists()
    approver = signed_in(make_user(django_user_model, "alice", tenant, "approver"))
    page = approver.get(f"/approvals/{approval.pk}/", secure=True)
    assert not page.context["can_decide"]


def test_an_approval_whose_run_was_halted_cannot_be_given(django_user_model, tenant) -> None:
    approval = make_pending(tenant)
    approval.entry.run.status = "halted"
    approval.entry.run.finished_at = timezone.now()
    approval.entry.run.termination_reason = "combination rolled back"
    approval.entry.run.save()
    approver = signed_in(make_user(django_user_model, "alice", tenant, "approver"))
    page = approver.get(f"/approvals/{approval.pk}/", secure=True)
    assert "its run is halted (combination rolled back)" in page.content.decode()
    assert not page.context["can_decide"]
    approver.post(f"/approvals/{approval.pk}/decide", {"decision": "approve"}, secure=True)
    assert ApprovalRequest.objects.get(pk=approval.pk).state == "invalidated"


def test_the_approver_sees_the_runtimes_condition_check(django_user_model, tenant, pending):
    approver = signed_in(make_user(django_user_model, "alice", tenant, "approver"))
    html = approver.get(f"/approvals/{pending.pk}/", secure=True).content.decode()
    assert ">apply again</span> app.py now has hash " + sha("a")[:12] in html
    assert "Not checked yet" not in html
