"""The manager's first screen says when a candidate does worse than the active combination, by
how much, and offers to halt or roll it back; nothing is said on too little traffic, and only
managers are told."""

from __future__ import annotations

import pytest

from ledger import combinations
from ledger.clock import db_now
from ledger.models import MetricBucket, Tenant, VersionCombination
from ledger.services import metrics
from ledger.services.metrics import bucket_of
from ledger.services.regressions import Gap, gaps_of, regressions
from tests.console.conftest import make_user, signed_in

pytestmark = pytest.mark.django_db
VERSIONS = {"model": "m", "rules": "r", "tool_schema": "t", "data_version": "d"}


def _traffic(
    tenant: Tenant,
    combination: VersionCombination,
    *,
    keyed: int,
    hits: int,
    executions: int,
    uncertain: int,
    duplicates: int = 0,
) -> None:
    """A bucket of the rollup, as ``metrics.roll_up`` writes one."""
    MetricBucket.objects.create(
        tenant=tenant,
        combination=combination,
        tool_name="create_order",
        bucket_start=bucket_of(db_now()),
        keyed_requests=keyed,
        dedup_hits=hits,
        executions=executions,
        became_uncertain=uncertain,
        duplicate_side_effects=duplicates,
    )


@pytest.fixture
def baseline_and_canary(tenant: Tenant) -> tuple[VersionCombination, VersionCombination]:
    ids = {"tenant": tenant, "actor": "x", "source": "api"}
    baseline, _ = combinations.create_combination(**ids, label="baseline", prompt="p1", **VERSIONS)
    candidate, _ = combinations.create_combination(
        **ids, label="candidate", prompt="p2", **VERSIONS
    )
    combinations.activate(**ids, combination_id=baseline.pk)
    combinations.set_canary(**ids, combination_id=candidate.pk, share_bp=2000)
    return baseline, candidate


def test_a_worse_candidate_is_on_the_managers_first_screen_with_the_gap_and_the_actions(
    django_user_model, tenant: Tenant, baseline_and_canary
) -> None:
    baseline, candidate = baseline_and_canary
    _traffic(tenant, baseline, keyed=1000, hits=271, executions=700, uncertain=6)
    _traffic(tenant, candidate, keyed=250, hits=28, executions=200, uncertain=40, duplicates=1)
    page = signed_in(make_user(django_user_model, "mia", tenant, "manager")).get("/")
    html = page.content.decode()
    assert 'id="regressions"' in html
    assert "candidate" in html and "baseline" in html
    assert "11.2% against 27.1% (-15.9 points)" in html  # dedup hit rate
    assert "20.0% against 0.9% (+19.1 points)" in html  # executions that became uncertain
    assert "1 against 0" in html  # duplicate side effects
    assert f"/combinations/{candidate.pk}/halt" in html
    assert f"/combinations/{candidate.pk}/rollback" in html
    operator = signed_in(make_user(django_user_model, "olga", tenant, "operator")).get("/")
    assert 'id="regressions"' not in operator.content.decode()


def test_nothing_is_said_on_too_little_traffic_or_when_the_candidate_does_as_well(
    tenant: Tenant, baseline_and_canary
) -> None:
    baseline, candidate = baseline_and_canary
    _traffic(tenant, baseline, keyed=1000, hits=271, executions=700, uncertain=6)
    _traffic(tenant, candidate, keyed=10, hits=0, executions=10, uncertain=9)
    assert regressions(tenant) == []
    MetricBucket.objects.filter(combination=candidate).update(
        keyed_requests=500, dedup_hits=140, executions=350, became_uncertain=4
    )
    assert regressions(tenant) == []


def test_the_gaps_are_the_candidates_against_the_baselines() -> None:
    baseline = metrics.Summary(keyed_requests=100, dedup_hits=30, executions=50, became_uncertain=1)
    worse = metrics.Summary(
        keyed_requests=100,
        dedup_hits=30,
        executions=50,
        became_uncertain=3,
        duplicate_side_effects=2,
    )
    assert gaps_of(worse, baseline) == [
        Gap("duplicate_side_effects", 2.0, 0.0),
        Gap("uncertain_share", 6.0, 2.0),
    ]
    more_retries = metrics.Summary(keyed_requests=100, dedup_hits=36, executions=50)
    assert gaps_of(more_retries, baseline) == [Gap("dedup_hit_rate", 36.0, 30.0)]
