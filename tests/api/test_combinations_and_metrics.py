"""Version combinations, rollback, canary, metrics and thresholds (issue: seed 001's rollout)."""

from __future__ import annotations

import threading
from collections import Counter

import pytest
from django.db import connections
from django.test import Client
from django.utils import timezone
from prometheus_client.parser import text_string_to_metric_families

from ledger import combinations
from ledger.combinations import thresholds
from ledger.domain import Idempotency
from ledger.models import (
    AlertEvent,
    AuditEvent,
    IdempotencyRecord,
    MetricBucket,
    Run,
    Tenant,
    Threshold,
    Tool,
    VersionCombination,
)
from ledger.services import metrics
from ledger.services.registry import override_tool
from ledger.services.runs import canary_bucket, pick_combination
from reconcile.models import DownstreamAdapter
from tests.api.conftest import ApiClient, client_for

VERSIONS = {"model": "m1", "prompt": "p1", "rules": "r1", "tool_schema": "t1", "data_version": "d1"}


def _combo(tenant: Tenant, label: str, **overrides: str) -> VersionCombination:
    combination, _ = combinations.create_combination(
        tenant=tenant, label=label, actor="alice", source="api", **{**VERSIONS, **overrides}
    )
    return combination


# --- canary ---------------------------------------------------------------------------------


def test_canary_buckets_are_stable_and_uniform() -> None:
    run_ids = [f"run-{i}" for i in range(10_000)]
    assert [canary_bucket(r) for r in run_ids] == [canary_bucket(r) for r in run_ids]
    in_share = sum(canary_bucket(r) < 2_000 for r in run_ids) / len(run_ids)
    assert abs(in_share - 0.20) < 0.02


@pytest.mark.django_db
def test_canary_share_is_honoured_within_tolerance(tenant) -> None:
    stable = _combo(tenant, "stable")
    canary = _combo(tenant, "canary", model="m2")
    combinations.activate(tenant=tenant, combination_id=stable.pk, actor="a", source="api")
    combinations.set_canary(
        tenant=tenant, combination_id=canary.pk, share_bp=1_500, actor="a", source="api"
    )
    # Each pick reads the tenant's combinations; the hash's spread over many more run ids is
    # test_canary_buckets_are_stable_and_uniform's. Run ids are fixed, so the count is too.
    picks = Counter(pick_combination(tenant, f"run-{i}").pk for i in range(2_000))
    assert abs(picks[canary.pk] / 2_000 - 0.15) < 0.02
    assert picks[stable.pk] + picks[canary.pk] == 2_000
    assert pick_combination(tenant, "run-42") == pick_combination(tenant, "run-42")


@pytest.mark.django_db
def test_canary_shares_cannot_exceed_the_whole(tenant) -> None:
    from ledger.errors import Conflict

    a, b = _combo(tenant, "a", model="ma"), _combo(tenant, "b", model="mb")
    combinations.set_canary(
        tenant=tenant, combination_id=a.pk, share_bp=6_000, actor="x", source="api"
    )
    with pytest.raises(Conflict):
        combinations.set_canary(
            tenant=tenant, combination_id=b.pk, share_bp=5_000, actor="x", source="api"
        )


# --- rollback ---------------------------------------------------------------------------------


@pytest.mark.django_db
def test_rollback_end_to_end_through_the_api(tenant, api: ApiClient) -> None:
    good = api.post("/combinations", {"label": "good", **VERSIONS}).json()
    bad = api.post("/combinations", {"label": "bad", **{**VERSIONS, "prompt": "p2"}}).json()
    api.post(f"/combinations/{good['id']}/activate")
    assert api.post(f"/combinations/{bad['id']}/activate").json()["previous_id"] == good["id"]

    api.start_run("run-bad")  # lands on the bad combination, now active
    assert Run.objects.get(run_id="run-bad").combination_id == bad["id"]
    body = {
        "run_id": "run-bad",
        "step_id": "s1",
        "tool": "create_order",
        "input": {"cart": "c1"},
        "business_object_id": "c1",
    }
    first = api.post("/calls", body).json()
    api.post(f"/calls/{first['call_id']}/complete", {"fencing_token": 1, "outcome": "uncertain"})
    # The orders' downstream answers look-ups by key: a worker can settle the unknown one.
    DownstreamAdapter.objects.create(
        tenant=tenant,
        tool=Tool.objects.get(tenant=tenant, name="create_order"),
        url_template="http://127.0.0.1:9/orders/{key}",
    )
    in_flight = api.post("/calls", {**body, "business_object_id": "c2", "step_id": "s2"}).json()
    assert in_flight["decision"] == "execute"

    dry = api.post(
        f"/combinations/{bad['id']}/rollback", {"reason": "dup spike", "dry_run": True}
    ).json()
    assert dry["dry_run"] and dry["restored"] == good["id"] and len(dry["unknown"]) == 1
    assert VersionCombination.objects.get(pk=bad["id"]).state == "active"  # nothing changed

    report = api.post(f"/combinations/{bad['id']}/rollback", {"reason": "dup spike"}).json()
    assert report["halted_runs"] == ["run-bad"]
    assert len(report["executing"]) == 1 and len(report["unknown"]) == 1
    assert report["queued_for_lookup"] == report["unknown"] and report["needs_human"] == []
    assert VersionCombination.objects.get(pk=good["id"]).state == "active"
    assert VersionCombination.objects.get(pk=bad["id"]).state == "halted"
    assert IdempotencyRecord.objects.get(key=report["unknown"][0]).next_reconcile_at is None

    next_call = api.post("/calls", {**body, "step_id": "s3", "business_object_id": "c3"}).json()
    assert next_call["observation"]["code"] == "RUN_HALTED"
    api.start_run("run-new")
    assert Run.objects.get(run_id="run-new").combination_id == good["id"]

    again = api.post(f"/combinations/{bad['id']}/rollback", {"reason": "dup spike"})
    assert again.status_code == 200 and again.json()["steps"][0]["kind"] == "already_halted"
    actions = list(
        AuditEvent.objects.filter(tenant=tenant, action__startswith="rollback.")
        .order_by("pk")
        .values_list("action", "actor")
    )
    assert [a for a, _ in actions[:3]] == [
        "rollback.runs_halted",
        "rollback.pending_listed",
        "rollback.completed",
    ]
    assert all(actor.startswith("token:") for _, actor in actions)
    assert (
        AuditEvent.objects.filter(action="combination.halted", target_id=str(bad["id"])).count()
        == 1
    )


@pytest.mark.django_db
def test_a_halted_combination_refuses_new_runs(tenant, api: ApiClient) -> None:
    only = api.post("/combinations", {"label": "only", **VERSIONS}).json()
    api.post(f"/combinations/{only['id']}/activate")
    api.post(f"/combinations/{only['id']}/halt", {"reason": "incident"})
    response = api.post("/runs", {"run_id": "r", "user_id": "u"})
    assert response.status_code == 409 and response.json()["code"] == "RUN_HALTED"


# --- metrics ----------------------------------------------------------------------------------


@pytest.mark.django_db
def test_metrics_on_a_hand_computed_scenario(tenant, api: ApiClient) -> None:
    combo = api.post("/combinations", {"label": "c", **VERSIONS}).json()
    api.post(f"/combinations/{combo['id']}/activate")
    api.start_run()

    def call(tool: str, inp: dict, step: str, obj: str | None = None) -> dict:
        body = {"run_id": "run-1", "step_id": step, "tool": tool, "input": inp}
        if obj:
            body["business_object_id"] = obj
        return api.post("/calls", body).json()

    def complete(c: dict, outcome: str, **extra: object) -> None:
        api.post(
            f"/calls/{c['call_id']}/complete",
            {"fencing_token": c["lease"]["fencing_token"], "outcome": outcome, **extra},
        )

    a = call("create_order", {"cart": 1}, "s1", "o1")  # 1 keyed, execution 1
    complete(a, "succeeded", result={"id": 1})
    call("create_order", {"cart": 1}, "s1", "o1")  # 2 keyed, dedup hit 1
    call("create_order", {"cart": 99}, "s1", "o1")  # 3 keyed, conflict: not a hit
    r = call("read_file", {"p": "x"}, "s2")  # 4 keyed, execution 2
    complete(r, "uncertain")  # became uncertain 1
    r2 = call("read_file", {"p": "x"}, "s2")  # 5 keyed, replay: execution 3, counted a duplicate
    # side effect: it may have run before, and the ledger cannot prove a tool has none.
    complete(r2, "succeeded", result="x")
    b = call("create_order", {"cart": 2}, "s3", "o2")  # 6 keyed, execution 4
    complete(b, "uncertain")  # became uncertain 2
    call("create_order", {"cart": 2}, "s3", "o2")  # 7 keyed, forbidden: hit 2
    # A deliberate duplicate side effect: someone overrides create_order as idempotent.
    override_tool(
        tool=Tool.objects.get(tenant=tenant, name="create_order"),
        idempotency=Idempotency.IDEMPOTENT,
        reason="wrongly",
        actor="mallory",
        source="console",
    )
    dup = call("create_order", {"cart": 2}, "s3", "o2")  # 8 keyed, execution 5: dup!
    assert dup["decision"] == "execute"

    metrics.roll_up()
    summary = metrics.summarize(tenant, combination_id=combo["id"])
    assert summary.keyed_requests == 8
    assert summary.dedup_hits == 2
    assert summary.dedup_hit_rate == pytest.approx(0.25)
    assert summary.executions == 5
    assert summary.became_uncertain == 2
    assert summary.duplicate_side_effects == 2  # the read's replay and the overridden order's
    assert summary.uncertain_now == 0  # the duplicate is executing now
    assert summary.decisions["conflict"] == 1 and summary.decisions["forbidden"] == 1
    tools = metrics.by_tool(tenant, since=None)
    assert tools["create_order"].duplicate_side_effects == 1
    assert tools["read_file"].duplicate_side_effects == 1
    assert metrics.roll_up() == 0  # nothing new: nothing counted twice
    assert metrics.summarize(tenant).keyed_requests == 8
    by_api = api.get("/metrics/combinations", window_minutes=60).json()
    assert by_api[0]["metrics"]["duplicate_side_effects"] == 2


@pytest.mark.django_db(transaction=True)
def test_threshold_crossing_halts_exactly_once_under_concurrency() -> None:
    tenant = Tenant.objects.create(slug="acme", name="Acme")
    api = client_for(tenant)
    combo = api.post("/combinations", {"label": "c", **VERSIONS}).json()
    api.post(f"/combinations/{combo['id']}/activate")
    thresholds.add_threshold(
        tenant=tenant,
        actor="ops",
        source="api",
        metric="uncertain_results",
        above=2,
        window_minutes=30,
        action="halt",
    )
    api.start_run()
    for i in range(4):
        c = api.post(
            "/calls",
            {
                "run_id": "run-1",
                "step_id": f"s{i}",
                "tool": "create_order",
                "input": {"i": i},
                "business_object_id": f"o{i}",
            },
        ).json()
        api.post(f"/calls/{c['call_id']}/complete", {"fencing_token": 1, "outcome": "uncertain"})
    barrier = threading.Barrier(6)

    def evaluator() -> None:
        try:
            barrier.wait(10)
            metrics.roll_up()
            thresholds.evaluate()
        finally:
            connections.close_all()

    workers = [threading.Thread(target=evaluator) for _ in range(6)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(30)
    assert AlertEvent.objects.count() == 1
    assert VersionCombination.objects.get(pk=combo["id"]).state == "halted"
    assert AuditEvent.objects.filter(action="combination.halted").count() == 1
    assert metrics.summarize(tenant).became_uncertain == 4  # rolled up once, not six times
    halted = api.post(
        "/calls", {"run_id": "run-1", "step_id": "s9", "tool": "read_file", "input": {}}
    ).json()
    assert halted["observation"]["code"] == "RUN_HALTED"


@pytest.mark.django_db
def test_thresholds_alert_by_email_and_webhook(tenant, sandbox, mailoutbox, settings) -> None:
    settings.LEDGER_OUTBOUND_ALLOW_PRIVATE = True  # the sandbox listens on loopback
    combo = _combo(tenant, "c")
    combinations.activate(tenant=tenant, combination_id=combo.pk, actor="a", source="api")
    Threshold.objects.create(
        tenant=tenant,
        metric="duplicate_side_effects",
        above=0,
        email="ops@example.com",
        webhook_url=f"{sandbox.url}/issues/objects",
    )
    MetricBucket.objects.create(
        tenant=tenant,
        combination=combo,
        tool_name="x",
        bucket_start=metrics.bucket_of(timezone.now()),
        duplicate_side_effects=1,
    )
    alerts = thresholds.evaluate()
    assert len(alerts) == 1
    thresholds.deliver(alerts[0])  # on_commit does not fire inside the test transaction
    assert mailoutbox[0].to == ["ops@example.com"]
    assert "duplicate_side_effects" in mailoutbox[0].body
    assert AlertEvent.objects.get().delivery == {"email": "sent", "webhook": "HTTP 201"}
    assert VersionCombination.objects.get(pk=combo.pk).state == "active"  # alert only


# --- /metrics -----------------------------------------------------------------------------------


@pytest.mark.django_db
def test_prometheus_endpoint_refuses_anonymous_and_parses(
    tenant,
    api: ApiClient,
    settings,
) -> None:
    settings.METRICS_TOKEN = "scrape-secret"
    api.start_run()
    api.post("/calls", {"run_id": "run-1", "step_id": "s", "tool": "read_file", "input": {}})
    metrics.roll_up()
    assert Client().get("/metrics", secure=True).status_code == 401
    wrong = Client().get("/metrics", secure=True, headers={"Authorization": "Bearer nope"})
    assert wrong.status_code == 401
    response = Client().get(
        "/metrics", secure=True, headers={"Authorization": "Bearer scrape-secret"}
    )
    assert response.status_code == 200
    families = {f.name: f for f in text_string_to_metric_families(response.content.decode())}
    assert {
        "agent_ledger_keyed_requests",
        "agent_ledger_dedup_hits",
        "agent_ledger_duplicate_side_effects",
        "agent_ledger_uncertain_records",
        "agent_ledger_decisions",
        "agent_ledger_reconcile_attempts",
        "agent_ledger_dedup_hit_ratio",
    } <= set(families)
    keyed = [
        s for s in families["agent_ledger_keyed_requests"].samples if s.name.endswith("_total")
    ]
    assert keyed[0].labels == {"tenant": "acme", "combination": "", "tool": "read_file"}
    assert keyed[0].value == 1


@pytest.mark.django_db
def test_the_oldest_pending_approval_is_one_a_human_can_still_give(tenant, settings) -> None:
    """An expired request waits for nobody: the gauge reads approvals.still_open."""
    from datetime import timedelta

    from ledger.models import ApprovalRequest
    from tests.console.conftest import make_pending

    settings.METRICS_TOKEN = "scrape-secret"
    expired, waiting = make_pending(tenant, "a.py", "run-a"), make_pending(tenant, "b.py", "run-b")
    ApprovalRequest.objects.filter(pk=waiting.pk).update(
        created_at=waiting.created_at - timedelta(minutes=10)
    )
    ApprovalRequest.objects.filter(pk=expired.pk).update(
        created_at=expired.created_at - timedelta(days=2),
        expires_at=expired.created_at - timedelta(days=1),
    )
    response = Client().get(
        "/metrics", secure=True, headers={"Authorization": "Bearer scrape-secret"}
    )
    families = {f.name: f for f in text_string_to_metric_families(response.content.decode())}
    (sample,) = families["agent_ledger_oldest_pending_approval_age_seconds"].samples
    assert 600 <= sample.value < 3600


@pytest.mark.django_db
def test_rolling_back_a_canary_keeps_the_active_combination(tenant, api: ApiClient) -> None:
    stable = api.post("/combinations", {"label": "stable", **VERSIONS}).json()
    canary = api.post("/combinations", {"label": "canary", **{**VERSIONS, "model": "m2"}}).json()
    api.post(f"/combinations/{stable['id']}/activate")
    api.post(f"/combinations/{canary['id']}/canary", {"share_bp": 10_000 - 1})
    api.start_run("run-canary")
    assert Run.objects.get(run_id="run-canary").combination_id in (stable["id"], canary["id"])
    report = api.post(f"/combinations/{canary['id']}/rollback", {"reason": "worse"}).json()
    assert report["restored"] is None
    states = dict(VersionCombination.objects.values_list("label", "state"))
    assert states == {"stable": "active", "canary": "halted"}
    for i in range(50):  # every new run now lands on the stable combination
        api.start_run(f"after-{i}")
    assert set(
        Run.objects.filter(run_id__startswith="after-").values_list("combination_id", flat=True)
    ) == {stable["id"]}


@pytest.mark.parametrize("path", ["/metrics/combinations", "/metrics/tools", "/metrics/series"])
def test_an_undeclared_query_parameter_is_refused(api: ApiClient, path: str) -> None:
    assert api.get(path, window_minutes=30).status_code == 200
    response = api.get(path, window_minute=30)  # a typo must not silently mean the default
    assert response.status_code == 400
    assert response.json()["code"] == "INVALID_INPUT"
    assert "window_minute" in response.json()["detail"]
