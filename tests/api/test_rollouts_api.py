"""Rollout plans through the HTTP API, and their steps in the Prometheus exposition."""

from __future__ import annotations

import pytest
from django.test import Client
from prometheus_client.parser import text_string_to_metric_families

from ledger.models import RolloutPlan, Threshold
from reconcile.tasks import evaluate_rollouts
from tests.api.conftest import ApiClient

pytestmark = pytest.mark.django_db
VERSIONS = {"prompt": "p", "rules": "r", "tool_schema": "t", "data_version": "d"}


@pytest.fixture
def candidate(api: ApiClient) -> int:
    baseline = api.post("/combinations", {"label": "baseline", "model": "a", **VERSIONS}).json()
    api.post(f"/combinations/{baseline['id']}/activate")
    return api.post("/combinations", {"label": "candidate", "model": "b", **VERSIONS}).json()["id"]


def _steps(*shares: int) -> list[dict[str, int]]:
    return [{"share_bp": share, "min_samples": 0} for share in shares]


def test_a_plan_is_started_followed_and_acted_on(api: ApiClient, candidate: int) -> None:
    created = api.post(
        "/rollouts", {"candidate_id": candidate, "steps": _steps(1000, 5000, 10_000)}
    )
    assert created.status_code == 201, created.content
    plan = created.json()
    assert plan["state"] == "running" and plan["current_step"] == 0
    assert [s["state"] for s in plan["steps"]] == ["running", "pending", "pending"]
    evaluate_rollouts()
    got = api.get(f"/rollouts/{plan['id']}").json()
    assert got["current_step"] == 1 and got["steps"][0]["analysis"]["outcome"] == "advance"
    paused = api.post(f"/rollouts/{plan['id']}/pause", {"reason": "weekend"})
    assert paused.status_code == 200 and paused.json()["state"] == "paused"
    again = api.post(f"/rollouts/{plan['id']}/pause", {"reason": "weekend"})
    assert again.status_code == 409
    assert [p["id"] for p in api.get("/rollouts").json()] == [plan["id"]]


@pytest.mark.parametrize(
    "body",
    [
        {"candidate_id": 0, "steps": _steps(10_000)},
        {"steps": _steps(10_000)},
        {"candidate_id": 1, "steps": []},
        {"candidate_id": 1, "steps": _steps(5000, 1000, 10_000)},
        {"candidate_id": 1, "steps": [{"share_bp": 20_000}]},
        {"candidate_id": 1, "steps": _steps(10_000), "extra": True},
    ],
)
def test_a_malformed_plan_is_a_400_and_starts_nothing(api: ApiClient, candidate: int, body) -> None:
    if body.get("candidate_id") == 1:
        body = {**body, "candidate_id": candidate}
    response = api.post("/rollouts", body)
    assert response.status_code == 400, response.content
    assert not RolloutPlan.objects.exists()


def test_an_action_needs_a_reason_and_a_known_verb(api: ApiClient, candidate: int) -> None:
    plan = api.post("/rollouts", {"candidate_id": candidate, "steps": _steps(1000, 10_000)}).json()
    assert api.post(f"/rollouts/{plan['id']}/pause", {"reason": ""}).status_code == 400
    assert api.post(f"/rollouts/{plan['id']}/explode", {"reason": "x"}).status_code in (400, 404)
    assert RolloutPlan.objects.get().state == "running"


def test_another_tenants_plan_is_not_found(
    api: ApiClient, other_api: ApiClient, candidate: int
) -> None:
    plan = api.post("/rollouts", {"candidate_id": candidate, "steps": _steps(1000, 10_000)}).json()
    assert other_api.get(f"/rollouts/{plan['id']}").status_code == 404
    assert other_api.post(f"/rollouts/{plan['id']}/abort", {"reason": "x"}).status_code == 404
    assert other_api.get("/rollouts").json() == []
    foreign = other_api.post("/rollouts", {"candidate_id": candidate, "steps": _steps(10_000)})
    assert foreign.status_code == 404


def test_each_step_is_exported_for_prometheus(
    api: ApiClient, candidate: int, tenant, settings
) -> None:
    settings.METRICS_TOKEN = "scrape-secret"
    Threshold.objects.create(tenant=tenant, metric="uncertain_results", above=5)
    plan = api.post("/rollouts", {"candidate_id": candidate, "steps": _steps(1000, 10_000)}).json()
    evaluate_rollouts()  # the 10% step passes; 100% completes the plan
    response = Client().get(
        "/metrics", secure=True, headers={"Authorization": "Bearer scrape-secret"}
    )
    families = {f.name: f for f in text_string_to_metric_families(response.content.decode())}
    labels = {"tenant": "acme", "plan": str(plan["id"]), "candidate": "candidate", "step": "0"}
    shares = [
        (s.labels, s.value) for s in families["agent_ledger_rollout_step_share_ratio"].samples
    ]
    assert shares == [(labels, 0.1), ({**labels, "step": "1"}, 1.0)]
    states = [s.labels["state"] for s in families["agent_ledger_rollout_step_state"].samples]
    assert states == ["passed", "passed"]
    observed = families["agent_ledger_rollout_step_threshold_observed"].samples
    assert [(s.labels["metric"], s.labels["verdict"], s.value) for s in observed] == [
        ("uncertain_results", "met", 0.0)
    ]
    measured = {s.labels["metric"] for s in families["agent_ledger_rollout_step_metric"].samples}
    assert {"keyed_requests", "became_uncertain", "duplicate_side_effects"} <= measured
