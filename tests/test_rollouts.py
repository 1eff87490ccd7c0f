"""Progressive rollout plans: steps advance on healthy metrics, halt and roll back on a crossed
threshold, wait for samples and time; managers' actions; runs keep their combination."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from ledger import combinations
from ledger.combinations import rollouts
from ledger.combinations.rollouts import StepSpec
from ledger.errors import Conflict, InvalidInput, NotFound
from ledger.models import (
    AuditEvent,
    RolloutPlan,
    Run,
    Tenant,
    Threshold,
    VersionCombination,
)
from ledger.services.runs import canary_bucket
from reconcile.tasks import evaluate_rollouts
from tests.api.conftest import ApiClient, client_for

pytestmark = pytest.mark.django_db
_ids = itertools.count(1)
TEN, HALF, FULL = 1000, 5000, 10_000


def _combination(tenant: Tenant, label: str) -> VersionCombination:
    return combinations.create_combination(
        tenant=tenant,
        label=label,
        actor="test",
        source="system",
        model=label,
        prompt="p",
        rules="r",
        tool_schema="t",
        data_version="d",
    )[0]


@pytest.fixture
def baseline(tenant: Tenant) -> VersionCombination:
    combination = _combination(tenant, "baseline")
    return combinations.activate(
        tenant=tenant, combination_id=combination.pk, actor="test", source="system"
    )


@pytest.fixture
def candidate(tenant: Tenant, baseline: VersionCombination) -> VersionCombination:
    return _combination(tenant, "candidate")


@pytest.fixture
def uncertain_threshold(tenant: Tenant) -> Threshold:
    return Threshold.objects.create(tenant=tenant, metric="uncertain_results", above=0)


def _plan(tenant: Tenant, candidate: VersionCombination, *steps: StepSpec) -> RolloutPlan:
    return rollouts.create_plan(
        tenant=tenant, candidate_id=candidate.pk, steps=list(steps), actor="boss", source="console"
    )


def _run_under(api: ApiClient, share_bp: int, *, candidate: bool) -> str:
    """Start a run (its combination picked by its id, as for any run) whose id falls inside
    (or outside) the candidate's share of new runs."""
    while True:
        run_id = f"r-{next(_ids)}"
        if (canary_bucket(run_id) < share_bp) == candidate:
            api.start_run(run_id)
            return run_id


def _traffic(api: ApiClient, share_bp: int, *, runs: int, outcome: str = "succeeded") -> list[str]:
    """``runs`` runs on the candidate and one beside it, each ordering once; the candidate's
    orders end with ``outcome``."""
    ids = [_run_under(api, share_bp, candidate=True) for _ in range(runs)]
    for run_id in [*ids, _run_under(api, share_bp, candidate=False)]:
        call = api.call(
            "create_order", {"cart": run_id}, run_id=run_id, business_object_id=run_id
        ).json()
        assert call["decision"] == "execute", call
        end = outcome if run_id in ids else "succeeded"
        body: dict[str, Any] = {"fencing_token": 1, "outcome": end}
        if end == "succeeded":
            body["result"] = {"order": run_id}
        api.post(f"/calls/{call['call_id']}/complete", body)
    return ids


def _actions(plan: RolloutPlan) -> list[str]:
    return list(
        AuditEvent.objects.filter(target_type="rolloutplan", target_id=str(plan.pk))
        .order_by("pk")
        .values_list("action", flat=True)
    )


def test_a_healthy_candidate_advances_to_100_percent_by_itself(
    tenant: Tenant, candidate: VersionCombination, baseline: VersionCombination, uncertain_threshold
) -> None:
    api = client_for(tenant)
    plan = _plan(
        tenant,
        candidate,
        StepSpec(TEN, min_samples=3),
        StepSpec(HALF, min_samples=3),
        StepSpec(FULL),
    )
    candidate.refresh_from_db()
    assert (candidate.state, candidate.canary_share_bp) == ("canary", TEN)
    for share in (TEN, HALF):
        _traffic(api, share, runs=3)
        assert evaluate_rollouts() == {"advance": 1, "halt": 0, "wait": 0}
    plan.refresh_from_db()
    candidate.refresh_from_db()
    baseline.refresh_from_db()
    assert plan.state == "completed" and plan.finished_at is not None
    assert candidate.state == "active" and baseline.state == "retired"
    assert [s.state for s in plan.steps.all()] == ["passed", "passed", "passed"]
    assert _actions(plan) == [
        "rollout.created",
        "rollout.step_started",
        "rollout.step_passed",
        "rollout.step_started",
        "rollout.step_passed",
        "rollout.step_started",
        "rollout.completed",
    ]
    passed = AuditEvent.objects.filter(action="rollout.step_passed").order_by("pk")
    for event, share in zip(passed, (TEN, HALF), strict=True):
        analysis = event.after["analysis"]
        assert event.after["share_bp"] == share
        assert analysis["samples"] >= 3 and analysis["metrics"]["became_uncertain"] == 0
        assert analysis["verdicts"][0]["verdict"] == "met"
    assert evaluate_rollouts() == {"advance": 0, "halt": 0, "wait": 0}  # nothing left to judge


def test_a_candidate_crossing_a_threshold_halts_and_rolls_back_in_one_evaluation(
    tenant: Tenant, candidate: VersionCombination, baseline: VersionCombination, uncertain_threshold
) -> None:
    api = client_for(tenant)
    plan = _plan(tenant, candidate, StepSpec(TEN, min_samples=3), StepSpec(HALF), StepSpec(FULL))
    on_candidate = _traffic(api, TEN, runs=2, outcome="uncertain")
    in_flight = _run_under(api, TEN, candidate=True)
    assert evaluate_rollouts() == {"advance": 0, "halt": 1, "wait": 0}  # one interval
    plan.refresh_from_db()
    candidate.refresh_from_db()
    baseline.refresh_from_db()
    assert plan.state == "halted" and "uncertain_results = 2 > 0" in plan.reason
    assert candidate.state == "halted" and baseline.state == "active"
    assert Run.objects.get(tenant=tenant, run_id=in_flight).status == "halted"
    assert set(
        Run.objects.filter(run_id__in=on_candidate).values_list("combination", flat=True)
    ) == {candidate.pk}
    assert [s.state for s in plan.steps.all()] == ["failed", "pending", "pending"]
    halted = AuditEvent.objects.get(action="rollout.halted")
    assert halted.after["analysis"]["metrics"]["became_uncertain"] == 2
    assert (
        halted.after["analysis"]["verdicts"][0] | {"verdict": "crossed", "observed": 2.0}
        == (halted.after["analysis"]["verdicts"][0])
    )
    assert "rollback.completed" in set(
        AuditEvent.objects.filter(target_type="versioncombination").values_list("action", flat=True)
    )
    # New runs go to the baseline; the candidate takes none.
    assert api.post("/runs", {"run_id": "after", "user_id": "u1"}).json()["combination_id"] == (
        baseline.pk
    )


def test_a_step_waits_for_its_samples_and_its_duration(
    tenant: Tenant, candidate: VersionCombination, uncertain_threshold
) -> None:
    api = client_for(tenant)
    plan = _plan(tenant, candidate, StepSpec(TEN, min_samples=5), StepSpec(FULL))
    _traffic(api, TEN, runs=2)
    assert evaluate_rollouts() == {"advance": 0, "halt": 0, "wait": 1}
    step = plan.steps.get(position=0)
    assert step.state == "running" and step.analysis["waiting_for"] == ["samples"]
    assert step.analysis["samples"] == 2
    rollouts.act_on_plan(
        tenant=tenant, plan_id=plan.pk, action="abort", actor="boss", source="console", reason="x"
    )
    later = _plan(tenant, candidate, StepSpec(TEN, min_minutes=5), StepSpec(FULL))
    assert evaluate_rollouts() == {"advance": 0, "halt": 0, "wait": 1}
    assert later.steps.get(position=0).analysis["waiting_for"] == ["duration"]


def test_runs_in_flight_keep_the_combination_they_started_under(
    tenant: Tenant, candidate: VersionCombination, baseline: VersionCombination
) -> None:
    api = client_for(tenant)
    _plan(tenant, candidate, StepSpec(TEN), StepSpec(HALF), StepSpec(FULL))
    on_candidate = _run_under(api, TEN, candidate=True)
    on_baseline = _run_under(api, TEN, candidate=False)
    evaluate_rollouts()  # to 50%
    evaluate_rollouts()  # to 100%: the candidate is active, the baseline retired
    for run_id, combination in ((on_candidate, candidate), (on_baseline, baseline)):
        assert Run.objects.get(tenant=tenant, run_id=run_id).combination_id == combination.pk
        call = api.call("create_order", {"cart": run_id}, run_id=run_id, business_object_id=run_id)
        assert call.json()["decision"] == "execute"
    assert api.post("/runs", {"run_id": "new", "user_id": "u1"}).json()["combination_id"] == (
        candidate.pk
    )


def test_a_shadow_step_puts_the_candidate_in_shadow(
    tenant: Tenant, candidate: VersionCombination
) -> None:
    plan = _plan(tenant, candidate, StepSpec(0), StepSpec(FULL))
    candidate.refresh_from_db()
    assert candidate.state == "shadow" and plan.steps.get(position=0).state == "running"


def test_managers_pause_resume_skip_and_abort_with_a_reason(
    tenant: Tenant, candidate: VersionCombination
) -> None:
    plan = _plan(tenant, candidate, StepSpec(TEN), StepSpec(HALF), StepSpec(FULL))

    def act(action: str, reason: str = "because") -> RolloutPlan:
        return rollouts.act_on_plan(
            tenant=tenant,
            plan_id=plan.pk,
            action=action,
            actor="boss",
            source="console",
            reason=reason,
        )

    assert act("pause").state == "paused"
    assert evaluate_rollouts() == {"advance": 0, "halt": 0, "wait": 0}  # a paused plan waits
    with pytest.raises(Conflict):
        act("pause")
    assert act("resume").state == "running"
    assert act("skip").current_step == 1
    candidate.refresh_from_db()
    assert candidate.canary_share_bp == HALF
    assert act("abort", "wrong prompt").state == "aborted"
    candidate.refresh_from_db()
    assert candidate.state == "retired" and candidate.canary_share_bp == 0
    events = AuditEvent.objects.filter(
        target_type="rolloutplan",
        action__in=["rollout.paused", "rollout.resumed", "rollout.skipped", "rollout.aborted"],
    )
    assert {e.action: e.detail for e in events} == {
        "rollout.paused": "because",
        "rollout.resumed": "because",
        "rollout.skipped": "because",
        "rollout.aborted": "wrong prompt",
    }
    with pytest.raises(Conflict):
        act("resume")


def test_skipping_the_step_before_the_last_promotes_the_candidate(
    tenant: Tenant, candidate: VersionCombination
) -> None:
    plan = _plan(tenant, candidate, StepSpec(TEN), StepSpec(FULL))
    skipped = rollouts.act_on_plan(
        tenant=tenant, plan_id=plan.pk, action="skip", actor="boss", source="console", reason="ok"
    )
    candidate.refresh_from_db()
    assert skipped.state == "completed" and candidate.state == "active"
    assert [s.state for s in plan.steps.all()] == ["skipped", "passed"]


@pytest.mark.parametrize(("action", "reason"), [("pause", " "), ("explode", "why not")])
def test_a_bad_action_changes_nothing(
    tenant: Tenant, candidate: VersionCombination, action: str, reason: str
) -> None:
    plan = _plan(tenant, candidate, StepSpec(TEN), StepSpec(FULL))
    before = AuditEvent.objects.count()
    with pytest.raises(InvalidInput):
        rollouts.act_on_plan(
            tenant=tenant,
            plan_id=plan.pk,
            action=action,
            actor="b",
            source="console",
            reason=reason,
        )
    plan.refresh_from_db()
    assert plan.state == "running" and AuditEvent.objects.count() == before


def test_another_tenants_plan_is_not_found(
    tenant: Tenant, other_tenant: Tenant, candidate: VersionCombination
) -> None:
    plan = _plan(tenant, candidate, StepSpec(TEN), StepSpec(FULL))
    with pytest.raises(NotFound):
        rollouts.act_on_plan(
            tenant=other_tenant,
            plan_id=plan.pk,
            action="abort",
            actor="x",
            source="api",
            reason="r",
        )


@pytest.mark.parametrize(
    "steps",
    [
        [],
        [StepSpec(HALF), StepSpec(TEN), StepSpec(FULL)],
        [StepSpec(TEN), StepSpec(HALF)],
        [StepSpec(TEN), StepSpec(TEN), StepSpec(FULL)],
        [StepSpec(-1), StepSpec(FULL)],
        [StepSpec(TEN, min_minutes=-5), StepSpec(FULL)],
    ],
)
def test_a_malformed_plan_is_refused_and_changes_nothing(
    tenant: Tenant, candidate: VersionCombination, steps: list[StepSpec]
) -> None:
    with pytest.raises(InvalidInput):
        _plan(tenant, candidate, *steps)
    assert not RolloutPlan.objects.exists()
    candidate.refresh_from_db()
    assert candidate.state == "new"


def test_one_open_plan_per_tenant_and_never_for_the_active_combination(
    tenant: Tenant, candidate: VersionCombination, baseline: VersionCombination
) -> None:
    _plan(tenant, candidate, StepSpec(TEN), StepSpec(FULL))
    other = _combination(tenant, "other")
    with pytest.raises(Conflict, match="open rollout"):
        _plan(tenant, other, StepSpec(TEN), StepSpec(FULL))
    with pytest.raises(Conflict, match="active"):
        _plan(tenant, baseline, StepSpec(TEN), StepSpec(FULL))
    assert RolloutPlan.objects.count() == 1


def test_a_step_is_judged_only_once_its_sample_has_settled(
    tenant: Tenant, candidate: VersionCombination, uncertain_threshold
) -> None:
    """An order still in flight when the step has enough samples may yet end uncertain: the
    step waits for it rather than pass (and, before 100%, promote) on half the evidence."""
    api = client_for(tenant)
    plan = _plan(tenant, candidate, StepSpec(TEN, min_samples=1), StepSpec(FULL))
    run_id = _run_under(api, TEN, candidate=True)
    call = api.call("create_order", {"cart": 1}, run_id=run_id, business_object_id="c").json()
    assert evaluate_rollouts() == {"advance": 0, "halt": 0, "wait": 1}
    step = plan.steps.get(position=0)
    assert step.analysis["waiting_for"] == ["in_flight"] and step.analysis["in_flight"] == 1
    later = _run_under(api, TEN, candidate=True)  # after the sample was fixed: not waited for
    api.call("create_order", {"cart": 2}, run_id=later, business_object_id="d")
    api.post(f"/calls/{call['call_id']}/complete", {"fencing_token": 1, "outcome": "uncertain"})
    assert evaluate_rollouts() == {"advance": 0, "halt": 1, "wait": 0}
    candidate.refresh_from_db()
    assert candidate.state == "halted"
