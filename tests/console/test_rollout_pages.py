"""The rollout pages: start a plan, see its progress and analysis, act on it with a reason."""

from __future__ import annotations

import pytest
from django.urls import reverse

from ledger import combinations
from ledger.models import AuditEvent, RolloutPlan, Tenant, Threshold, VersionCombination
from reconcile.tasks import evaluate_rollouts
from tests.console.conftest import make_user, signed_in

pytestmark = pytest.mark.django_db


def _versions(model: str) -> dict[str, str]:
    return {"model": model, "prompt": "p", "rules": "r", "tool_schema": "t", "data_version": "d"}


@pytest.fixture
def candidate(tenant: Tenant) -> VersionCombination:
    baseline, _ = combinations.create_combination(
        tenant=tenant, label="baseline", actor="x", source="api", **_versions("a")
    )
    combinations.activate(tenant=tenant, combination_id=baseline.pk, actor="x", source="api")
    return combinations.create_combination(
        tenant=tenant, label="candidate", actor="x", source="api", **_versions("b")
    )[0]


@pytest.fixture
def manager(django_user_model, tenant):
    return signed_in(make_user(django_user_model, "boss", tenant, "manager"))


def _start(manager, candidate: VersionCombination, shares: str = "shadow, 10, 100") -> object:
    return manager.post(
        reverse("console:rollout_create"),
        {"candidate": candidate.pk, "shares": shares, "min_minutes": "0", "min_samples": "0"},
        secure=True,
    )


def test_a_manager_starts_a_rollout_and_follows_its_steps(manager, candidate, tenant) -> None:
    Threshold.objects.create(tenant=tenant, metric="uncertain_results", above=3)
    response = _start(manager, candidate)
    plan = RolloutPlan.objects.get()
    assert response.status_code == 302 and response.url == reverse(
        "console:rollout", args=[plan.pk]
    )
    assert [(s.share_bp, s.state) for s in plan.steps.all()] == [
        (0, "running"),
        (1000, "pending"),
        (10_000, "pending"),
    ]
    evaluate_rollouts()
    page = manager.get(reverse("console:rollout", args=[plan.pk]), secure=True).content.decode()
    assert "Step 1" in page and "Step 3" in page and "passed" in page
    # The analysis the step passed by; the steps to come are not started.
    assert "uncertain results" in page and "within the threshold" in page
    listing = manager.get(reverse("console:rollouts"), secure=True).content.decode()
    assert f'href="{reverse("console:rollout", args=[plan.pk])}"' in listing and "10%" in listing


def test_bad_steps_start_nothing_and_the_form_keeps_what_was_typed(manager, candidate) -> None:
    for shares in ("10, 5, 100", "ten, 100", "10, 50"):
        response = _start(manager, candidate, shares)
        assert response.status_code == 400
        page = response.content.decode()
        assert f'name="shares" value="{shares}"' in page and 'name="min_minutes" value="0"' in page
        assert f'<option value="{candidate.pk}" selected>' in page
        error = page.split('id="rollout-error"')[1].split("</p>")[0]
        text = error.split(">", 1)[1]
        assert text[0].isupper() and text.endswith("."), text  # a sentence, not a clause
    assert not RolloutPlan.objects.exists()


def test_actions_need_a_reason_and_are_audited(manager, candidate) -> None:
    _start(manager, candidate)
    plan = RolloutPlan.objects.get()
    url = reverse("console:rollout_action", args=[plan.pk])
    manager.post(url, {"action": "pause", "reason": ""}, secure=True)
    plan.refresh_from_db()
    assert plan.state == "running"
    manager.post(url, {"action": "pause", "reason": "waiting for the weekend"}, secure=True)
    plan.refresh_from_db()
    assert plan.state == "paused"
    event = AuditEvent.objects.get(action="rollout.paused")
    assert (event.actor, event.detail, event.source) == (
        "boss",
        "waiting for the weekend",
        "console",
    )
    assert manager.get(url, secure=True).status_code == 405


def test_only_managers_of_the_tenant_see_rollouts(
    django_user_model, manager, candidate, other_tenant
) -> None:
    _start(manager, candidate)
    plan = RolloutPlan.objects.get()
    operator = signed_in(make_user(django_user_model, "op", plan.tenant, "operator"))
    assert operator.get(reverse("console:rollouts"), secure=True).status_code == 403
    action = reverse("console:rollout_action", args=[plan.pk])
    assert operator.post(action, {"action": "abort", "reason": "x"}, secure=True).status_code == 403
    outsider = signed_in(make_user(django_user_model, "other", other_tenant, "manager"))
    assert outsider.get(reverse("console:rollout", args=[plan.pk]), secure=True).status_code == 404
    assert outsider.post(action, {"action": "abort", "reason": "x"}, secure=True).status_code == 404
    plan.refresh_from_db()
    assert plan.state == "running"
