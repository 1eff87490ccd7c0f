"""Console views: roles, tenants, methods, CSRF, escaping, query counts."""

from __future__ import annotations

import time

import pytest
from django.test import Client
from django.urls import reverse

from ledger import combinations
from ledger.domain import EscalationKind
from ledger.models import ApprovalRequest, AuditEvent, Membership, Run, Threshold
from tests.api.conftest import client_for
from tests.console.conftest import make_user, signed_in

pytestmark = pytest.mark.django_db
VERSIONS = {"model": "m", "rules": "r", "tool_schema": "t", "data_version": "d"}


def test_anonymous_users_are_sent_to_sign_in() -> None:
    response = Client().get("/", secure=True)
    assert response.status_code == 302 and response["Location"].startswith("/login/")


def test_sign_in_page_renders() -> None:
    response = Client().get("/login/", secure=True)
    assert response.status_code == 200 and b'name="password"' in response.content


def test_inbox_shows_counts(django_user_model, tenant, pending) -> None:
    client = signed_in(make_user(django_user_model, "op", tenant, "operator"))
    response = client.get("/", secure=True)
    assert response.status_code == 200
    assert response.context["inbox"]["approvals"].count == 1
    fragment = client.get("/", secure=True, headers={"HX-Request": "true"})
    assert b"<html" not in fragment.content and b'id="inbox"' in fragment.content


def test_a_user_without_a_tenant_is_refused(django_user_model) -> None:
    user = django_user_model.objects.create_user("lonely", password="pw-123456789")
    assert signed_in(user).get("/", secure=True).status_code == 403


@pytest.mark.parametrize(
    ("roles", "status"),
    [(("approver",), 200), (("admin",), 200), (("operator",), 403), (("manager",), 403)],
)
def test_approvals_need_the_approver_role(
    django_user_model, tenant, pending, roles, status
) -> None:
    client = signed_in(make_user(django_user_model, "u", tenant, *roles))
    assert client.get("/approvals/", secure=True).status_code == status
    assert client.get(f"/approvals/{pending.pk}/", secure=True).status_code == status


def test_another_tenants_approval_is_a_404(django_user_model, other_tenant, pending) -> None:
    client = signed_in(make_user(django_user_model, "them", other_tenant, "approver"))
    assert client.get(f"/approvals/{pending.pk}/", secure=True).status_code == 404
    response = client.post(f"/approvals/{pending.pk}/decide", {"decision": "approve"}, secure=True)
    assert response.status_code == 404
    assert ApprovalRequest.objects.get().state == "pending"


def test_decide_is_post_only(django_user_model, tenant, pending) -> None:
    client = signed_in(make_user(django_user_model, "ap", tenant, "approver"))
    assert client.get(f"/approvals/{pending.pk}/decide", secure=True).status_code == 405


def test_csrf_is_enforced(django_user_model, tenant, pending) -> None:
    user = make_user(django_user_model, "ap", tenant, "approver")
    client = Client(enforce_csrf_checks=True)
    client.force_login(user)
    response = client.post(f"/approvals/{pending.pk}/decide", {"decision": "approve"}, secure=True)
    assert response.status_code == 403
    assert ApprovalRequest.objects.get().state == "pending"


def test_the_diff_and_names_are_escaped(django_user_model, tenant, pending) -> None:
    client = signed_in(make_user(django_user_model, "ap", tenant, "approver"))
    html = client.get(f"/approvals/{pending.pk}/", secure=True).content.decode()
    assert "<script>alert(1)</script>" not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "&lt;b&gt;old&lt;/b&gt;" in html


def test_approve_then_the_runtime_may_start(django_user_model, tenant, pending) -> None:
    client = signed_in(make_user(django_user_model, "ap", tenant, "approver"))
    response = client.post(f"/approvals/{pending.pk}/decide", {"decision": "approve"}, secure=True)
    assert response.status_code == 302 and response["Location"] == reverse("console:approvals")
    assert ApprovalRequest.objects.get().state == "approved"
    assert AuditEvent.objects.filter(action="approval.approved", actor="ap").exists()


def test_reject_needs_a_reason(django_user_model, tenant, pending) -> None:
    client = signed_in(make_user(django_user_model, "ap", tenant, "approver"))
    response = client.post(
        f"/approvals/{pending.pk}/decide", {"decision": "reject"}, secure=True, follow=True
    )
    assert "needs a reason" in response.content.decode()
    assert ApprovalRequest.objects.get().state == "pending"
    client.post(
        f"/approvals/{pending.pk}/decide",
        {"decision": "reject", "reason": "wrong file"},
        secure=True,
    )
    approval = ApprovalRequest.objects.get()
    assert approval.state == "rejected" and approval.decision_reason == "wrong file"


def test_switching_to_a_tenant_you_are_not_in_is_refused(
    django_user_model, tenant, other_tenant
) -> None:
    user = make_user(django_user_model, "multi", tenant, "operator")
    client = signed_in(user)
    assert client.post("/tenant", {"tenant": other_tenant.pk}, secure=True).status_code == 404
    Membership.objects.create(user=user, tenant=other_tenant)
    assert client.post("/tenant", {"tenant": other_tenant.pk}, secure=True).status_code == 302
    assert client.get("/", secure=True).context["tenant"] == other_tenant


def test_inbox_query_count_is_bounded(
    django_user_model, tenant, pending, django_assert_max_num_queries
) -> None:
    client = signed_in(make_user(django_user_model, "op", tenant, "operator"))
    with django_assert_max_num_queries(12):
        client.get("/", secure=True)


@pytest.mark.parametrize(("roles", "status"), [(("operator",), 200), (("approver",), 403)])
def test_unknown_calls_need_the_operator_role(
    django_user_model, tenant, unknown, roles, status
) -> None:
    client = signed_in(make_user(django_user_model, "u", tenant, *roles))
    assert client.get("/unknown/", secure=True).status_code == status
    assert client.get(f"/unknown/{unknown.pk}/", secure=True).status_code == status


def test_marking_succeeded_needs_evidence_and_duplicates_then_get_it(
    django_user_model, tenant, unknown
):
    client = signed_in(make_user(django_user_model, "op", tenant, "operator"))
    client.post(f"/unknown/{unknown.pk}/action", {"action": "succeeded"}, secure=True)
    unknown.refresh_from_db()
    assert unknown.state == "unknown"
    client.post(
        f"/unknown/{unknown.pk}/action",
        {"action": "succeeded", "note": "order 991 exists in the shop admin"},
        secure=True,
    )
    unknown.refresh_from_db()
    assert unknown.state == "succeeded"
    assert AuditEvent.objects.filter(action="record.resolved_succeeded", actor="op").exists()
    api = client_for(tenant)
    again = api.call("create_order", {"cart": 1}, business_object_id="c1").json()
    assert again["observation"]["ok"] is True
    assert "order 991" in str(again["observation"]["content"])


def test_marking_not_happened_and_escalating(django_user_model, tenant, unknown) -> None:
    client = signed_in(make_user(django_user_model, "op", tenant, "operator"))
    client.post(
        f"/unknown/{unknown.pk}/action", {"action": "escalate", "note": "vendor down"}, secure=True
    )
    unknown.refresh_from_db()
    assert unknown.escalated_at is not None and unknown.escalation_reason == "vendor down"
    assert unknown.escalation_kind == EscalationKind.OPERATOR
    client.post(f"/unknown/{unknown.pk}/action", {"action": "lookup"}, secure=True)
    unknown.refresh_from_db()
    assert (unknown.escalated_at, unknown.escalation_kind) == (None, "")
    client.post(
        f"/unknown/{unknown.pk}/action",
        {"action": "failed", "note": "no order in the shop"},
        secure=True,
    )
    unknown.refresh_from_db()
    assert unknown.state == "failed_final" and unknown.error_retryable


def test_another_tenants_unknown_call_is_a_404(django_user_model, other_tenant, unknown) -> None:
    client = signed_in(make_user(django_user_model, "them", other_tenant, "operator"))
    assert client.get(f"/unknown/{unknown.pk}/", secure=True).status_code == 404
    assert (
        client.post(
            f"/unknown/{unknown.pk}/action", {"action": "failed", "note": "x"}, secure=True
        ).status_code
        == 404
    )
    unknown.refresh_from_db()
    assert unknown.state == "unknown"


@pytest.mark.parametrize(("roles", "status"), [(("manager",), 200), (("operator",), 403)])
def test_combinations_need_the_manager_role(
    django_user_model, tenant, combos, roles, status
) -> None:
    client = signed_in(make_user(django_user_model, "u", tenant, *roles))
    assert client.get("/combinations/", secure=True).status_code == status


def test_another_tenants_combination_is_a_404(django_user_model, other_tenant, combos) -> None:
    _good, bad = combos
    client = signed_in(make_user(django_user_model, "them", other_tenant, "manager"))
    assert client.get(f"/combinations/{bad.pk}/rollback", secure=True).status_code == 404
    assert (
        client.post(
            f"/combinations/{bad.pk}/action", {"action": "halt", "reason": "x"}, secure=True
        ).status_code
        == 404
    )


def test_audit_log_is_per_tenant_filterable_and_paged(
    django_user_model, tenant, other_tenant, combos
) -> None:
    from ledger.services.audit import audit

    for i in range(60):
        audit(
            tenant=tenant, actor=f"bot{i % 2}", action="test.event", target=tenant, source="system"
        )
    audit(
        tenant=other_tenant,
        actor="them",
        action="test.secret",
        target=other_tenant,
        source="system",
    )
    client = signed_in(make_user(django_user_model, "aud", tenant, "operator"))
    first = client.get("/audit/", {"action": "test."}, secure=True)
    assert len(first.context["events"]) == 50 and first.context["next_before"]
    assert all(e.tenant_id == tenant.pk for e in first.context["events"])
    second = client.get(
        "/audit/", {"action": "test.", "before": first.context["next_before"]}, secure=True
    )
    assert len(second.context["events"]) == 10
    only_bot1 = client.get("/audit/", {"actor": "bot1", "action": "test."}, secure=True)
    assert {e.actor for e in only_bot1.context["events"]} == {"bot1"}


def test_tools_page_lists_classifications_and_managers_override(django_user_model, tenant) -> None:
    from ledger.models import Tool
    from tests.factories import make_tool

    tool = make_tool(tenant, "sync_crm")
    viewer = signed_in(make_user(django_user_model, "op", tenant, "operator"))
    page = viewer.get("/tools/", secure=True)
    assert page.status_code == 200 and b"sync_crm" in page.content and not page.context["can_edit"]
    assert (
        viewer.post(
            f"/tools/{tool.pk}/override", {"idempotency": "idempotent", "reason": "x"}, secure=True
        ).status_code
        == 403
    )
    manager = signed_in(make_user(django_user_model, "mgr", tenant, "manager"))
    manager.post(
        f"/tools/{tool.pk}/override", {"idempotency": "idempotent", "reason": ""}, secure=True
    )
    assert Tool.objects.get(pk=tool.pk).replay_policy == "never"  # a reason is required
    manager.post(
        f"/tools/{tool.pk}/override",
        {"idempotency": "idempotent", "reason": "read-only sync"},
        secure=True,
    )
    assert Tool.objects.get(pk=tool.pk).replay_policy == "auto"
    assert AuditEvent.objects.filter(action="tool.override_set", actor="mgr").exists()


def test_importing_mcp_tools_from_the_console(django_user_model, tenant) -> None:
    from pathlib import Path

    from ledger.models import Tool

    listing = (
        Path(__file__).parents[1] / "fixtures" / "mcp" / "mcp_server_git_tools_list.json"
    ).read_text()
    manager = signed_in(make_user(django_user_model, "mgr", tenant, "manager"))
    manager.post(
        "/tools/import", {"server": "git", "trust": "untrusted", "tools_list": listing}, secure=True
    )
    assert Tool.objects.filter(tenant=tenant, name__startswith="git/").count() == 12
    bad = manager.post(
        "/tools/import",
        {"server": "git", "trust": "untrusted", "tools_list": "{not json"},
        secure=True,
        follow=True,
    )
    assert "not valid JSON" in bad.content.decode()
    assert Tool.objects.filter(tenant=tenant, name__startswith="git/").count() == 12  # unchanged
    assert Tool.objects.get(tenant=tenant, name="git/git_commit").replay_policy == "never"


def test_every_chart_spans_the_last_24_hours_whatever_times_have_data(
    django_user_model, tenant, combos, unknown
) -> None:
    from ledger.services import metrics

    metrics.roll_up()  # the fixtures' calls fall in one or two 5-minute buckets
    manager = signed_in(make_user(django_user_model, "mgr", tenant, "manager"))
    before = time.time()
    page = manager.get("/metrics/", secure=True)
    for chart in page.context["charts"]:
        data = chart.data()
        assert 1 <= len(data["times"]) <= 2
        assert data["end"] - data["start"] == 24 * 3600
        assert before - 5 <= data["end"] <= time.time() + 1
        assert all(data["start"] <= t <= data["end"] for t in data["times"])


def test_metrics_dashboard_draws_charts_and_adds_thresholds(
    django_user_model, tenant, combos, unknown
) -> None:
    from ledger.models import Threshold
    from ledger.services import metrics

    metrics.roll_up()
    manager = signed_in(make_user(django_user_model, "mgr", tenant, "manager"))
    page = manager.get("/metrics/", secure=True)
    assert page.status_code == 200
    html = page.content.decode()
    assert html.count('class="card chart"') == 3
    assert html.count('<table class="list chart-table">') == 3  # drawn by charts.js over it
    assert 'id="chart-dedup-data" type="application/json"' in html
    manager.post(
        "/metrics/",
        {"metric": "uncertain_results", "above": "3", "window_minutes": "15", "action": "halt"},
        secure=True,
    )
    assert Threshold.objects.get(tenant=tenant).action == "halt"
    manager.post("/metrics/", {"metric": "nonsense", "above": "x"}, secure=True)
    assert Threshold.objects.count() == 1
    operator = signed_in(make_user(django_user_model, "op", tenant, "operator"))
    assert operator.get("/metrics/", secure=True).status_code == 403


@pytest.mark.parametrize(
    "path",
    [
        "/audit/?before=²",
        "/unknown/bulk?ids=²&action=lookup",
        "/unknown/bulk?ids=99999999999999999999999&action=lookup",
        "/unknown/?after=²",
        "/ledger/runs/RUN/?after=²",
        "/combinations/COMBO/rollback?restore=²",
    ],
)
def test_odd_digits_in_parameters_are_bad_input_not_a_500(django_user_model, tenant, path):
    run = Run.objects.create(tenant=tenant, run_id="r1", user_id="u")
    combo, _ = combinations.create_combination(
        tenant=tenant, label="c", actor="x", source="api", prompt="c", **VERSIONS
    )
    root = signed_in(make_user(django_user_model, "root", tenant, "admin"))
    url = path.replace("RUN", str(run.pk)).replace("COMBO", str(combo.pk))
    assert root.get(url, secure=True).status_code in (200, 302, 400, 404)


@pytest.mark.parametrize(
    "bad",
    [
        {"metric": "dedup_hit_rate", "above": "-1", "window_minutes": "15"},
        {"metric": "dedup_hit_rate", "above": "0.5", "window_minutes": "0"},
        {"metric": "dedup_hit_rate", "above": "0.5", "window_minutes": "15", "email": "nope"},
        {"metric": "dedup_hit_rate", "above": "nan", "window_minutes": "15"},
    ],
)
def test_a_bad_threshold_is_a_clear_error_kept_as_typed_not_a_500(
    django_user_model, tenant, bad
) -> None:
    manager = signed_in(make_user(django_user_model, "maria", tenant, "manager"))
    response = manager.post("/metrics/", {**bad, "action": "halt"}, secure=True)
    page = response.content.decode()
    assert response.status_code == 400
    assert (
        "Invalid threshold" in page or "A threshold needs a metric, a number and a window" in page
    )
    # The form shows what was typed, to be mended rather than typed again.
    assert f'name="above" size="6" required value="{bad["above"]}"' in page
    assert f'name="window_minutes" size="4" value="{bad["window_minutes"]}"' in page
    assert '<option value="halt" selected>' in page
    assert not Threshold.objects.exists()


def test_rates_in_the_metrics_and_combinations_tables_are_percentages(
    django_user_model, tenant, combos
) -> None:
    from ledger.services import metrics

    api = client_for(tenant)
    api.start_run("run-rates")
    for step in ("s-1", "s-2"):  # the second order of cart c9 is a dedup hit
        call = api.call(
            "create_order", {"cart": 9}, run_id="run-rates", step_id=step, business_object_id="c9"
        ).json()
        if call["decision"] == "execute":
            api.post(
                f"/calls/{call['call_id']}/complete",
                {"fencing_token": 1, "outcome": "succeeded", "result": {"order": 9}},
            )
    metrics.roll_up()
    rate = metrics.by_tool(tenant, since=None)["create_order"].dedup_hit_rate
    assert 0 < rate < 1
    manager = signed_in(make_user(django_user_model, "mgr", tenant, "manager"))
    shown = f"<td>{rate * 100:.1f}%</td>"
    assert shown in manager.get("/metrics/", secure=True).content.decode()
    assert shown in manager.get("/combinations/", secure=True).content.decode()
