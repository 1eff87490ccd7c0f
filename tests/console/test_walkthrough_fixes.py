"""Found by a new user's walk through `make run`: each test is one of their findings."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from ledger.models import ApprovalRequest, AuditEvent, IdempotencyRecord, Threshold
from ledger.services import combinations
from reconcile.models import Heartbeat
from reconcile.tasks import schedule_reconciliation
from tests.api.conftest import client_for
from tests.console.conftest import make_pending, make_user, sha, signed_in

pytestmark = pytest.mark.django_db


def test_denied_attempts_are_in_the_audit_log(django_user_model, tenant, pending) -> None:
    operator = signed_in(make_user(django_user_model, "olga", tenant, "operator"))
    assert (
        operator.post(
            f"/approvals/{pending.pk}/decide", {"decision": "approve"}, secure=True
        ).status_code
        == 403
    )
    assert operator.get("/combinations/", secure=True).status_code == 403
    denied = AuditEvent.objects.filter(outcome="denied", action="console.denied", actor="olga")
    assert sorted((e.target_type, e.target_id) for e in denied) == [
        ("approvalrequest", str(pending.pk)),
        ("page", "/combinations/"),
    ]
    assert {e.after["reason"] for e in denied} == {"role"}
    assert all(e.tenant_id == tenant.pk for e in denied)
    page = operator.get("/audit/", {"outcome": "denied"}, secure=True)
    assert len(page.context["events"]) == 2


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


@pytest.mark.parametrize(
    "bad",
    [
        {"metric": "dedup_hit_rate", "above": "-1", "window_minutes": "15"},
        {"metric": "dedup_hit_rate", "above": "0.5", "window_minutes": "0"},
        {"metric": "dedup_hit_rate", "above": "0.5", "window_minutes": "15", "email": "nope"},
        {"metric": "dedup_hit_rate", "above": "nan", "window_minutes": "15"},
    ],
)
def test_a_bad_threshold_is_a_clear_error_not_a_500(django_user_model, tenant, bad) -> None:
    manager = signed_in(make_user(django_user_model, "maria", tenant, "manager"))
    response = manager.post("/metrics/", bad, secure=True, follow=True)
    assert response.status_code == 200
    assert "invalid threshold" in response.content.decode()
    assert not Threshold.objects.exists()


def test_a_conflict_found_by_the_runtime_is_escalated_and_counted(django_user_model, tenant):
    api = client_for(tenant)
    api.start_run()
    plan = {"workspace": "w", "path": "a.py", "before_hash": sha("a"), "after_hash": sha("b")}
    first = api.call("write_file", {"path": "a.py"}, write_plan=plan).json()
    api.post(f"/calls/{first['call_id']}/complete", {"fencing_token": 1, "outcome": "uncertain"})
    api.post(f"/calls/{first['call_id']}/replay", {"current_hash": sha("someone else")})
    record = IdempotencyRecord.objects.get()
    assert record.escalated_at is not None and record.escalation_reason.startswith("Write conflict")
    operator = signed_in(make_user(django_user_model, "olga", tenant, "operator"))
    assert operator.get("/", secure=True).context["inbox"]["conflicts"].count == 1


def test_operators_are_told_when_no_worker_is_looking_calls_up(django_user_model, tenant) -> None:
    operator = signed_in(make_user(django_user_model, "olga", tenant, "operator"))
    assert "No reconciliation worker has run yet" in operator.get("/", secure=True).content.decode()
    schedule_reconciliation()  # what a worker runs every 10 s
    home = operator.get("/", secure=True).content.decode()
    assert "reconciliation worker" not in home
    Heartbeat.objects.update(beat_at=timezone.now() - timedelta(minutes=5))
    unknown = operator.get("/unknown/", secure=True).content.decode()
    assert "Look-ups have stopped: no reconciliation worker has run for 5" in unknown


def test_states_and_decisions_are_words_in_the_users_language(django_user_model, tenant, pending):
    from console.models import Preferences

    user = make_user(django_user_model, "li", tenant, "approver")
    Preferences.objects.create(user=user, language="zh-hans")
    html = signed_in(user).get(f"/approvals/{pending.pk}/", secure=True).content.decode()
    assert '<span class="badge">待审批</span>' in html  # the approval's state, "pending"
    assert ">pending<" not in html
    assert "有条件" in html  # conditional


def test_rolling_back_the_only_active_combination_asks_what_to_restore(
    django_user_model, tenant
) -> None:
    versions = {"model": "m", "rules": "r", "tool_schema": "t", "data_version": "d"}
    only, _ = combinations.create_combination(
        tenant=tenant, label="only", actor="x", source="api", prompt="p1", **versions
    )
    spare, _ = combinations.create_combination(
        tenant=tenant, label="spare", actor="x", source="api", prompt="p2", **versions
    )
    combinations.activate(tenant=tenant, combination_id=only.pk, actor="x", source="api")
    manager = signed_in(make_user(django_user_model, "maria", tenant, "manager"))
    asks = manager.get(f"/combinations/{only.pk}/rollback", secure=True)
    assert asks.status_code == 200 and asks.context["report"] is None
    html = asks.content.decode()
    assert "no previous combination to restore" in html and f'value="{spare.pk}"' in html
    preview = manager.get(f"/combinations/{only.pk}/rollback", {"restore": spare.pk}, secure=True)
    assert preview.context["report"].dry_run and preview.context["restored"] == spare
    no_reason = manager.post(
        f"/combinations/{only.pk}/rollback", {"restore": spare.pk}, secure=True
    )
    assert no_reason["Location"].endswith(f"?restore={spare.pk}")
    manager.post(
        f"/combinations/{only.pk}/rollback", {"restore": spare.pk, "reason": "bad"}, secure=True
    )
    only.refresh_from_db()
    spare.refresh_from_db()
    assert (only.state, spare.state) == ("halted", "active")
