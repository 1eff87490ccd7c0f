"""Regressions: a candidate combination measured against the baseline it would replace, on the
seeds' three metrics (seed 001: dedup hit rate, uncertain results, duplicate side effects), so a
manager is told the moment a canary or a shadow does worse, by how much, and what to do.

The baseline is the tenant's active combination; the candidates are those in canary or in
shadow. Over the window both must have had ``MIN_KEYED`` keyed requests, else nothing is said
either way. A candidate regresses when it causes a duplicate side effect the baseline does not,
when its uncertain share (executions whose outcome became unknown, of its executions) is
``UNCERTAIN_POINTS`` percentage points above the baseline's, or when its dedup hit rate is
``DEDUP_POINTS`` points away from the baseline's in either direction (more retries answered from
the record, or fewer: its runtime retries differently, which is what a new prompt or tool schema
changes). Thresholds judge a combination on its own (``thresholds``); this compares the two.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta

from ledger.clock import db_now
from ledger.models import Tenant, VersionCombination
from ledger.services import metrics

WINDOW = timedelta(hours=24)
MIN_KEYED = 20
DEDUP_POINTS = 5.0
UNCERTAIN_POINTS = 2.0

State = VersionCombination.State


@dataclass(frozen=True)
class Gap:
    """One metric of the candidate against the baseline's: ``metric`` (``dedup_hit_rate``,
    ``uncertain_share``, ``duplicate_side_effects``), both values (percentages for the two
    rates, a count for duplicates) and the difference, candidate minus baseline."""

    metric: str
    candidate: float
    baseline: float

    @property
    def difference(self) -> float:
        return self.candidate - self.baseline


@dataclass(frozen=True)
class Regression:
    candidate: VersionCombination
    baseline: VersionCombination
    gaps: list[Gap] = field(default_factory=list)


def uncertain_share(summary: metrics.Summary) -> float:
    """Executions whose outcome became unknown, in percent of the executions."""
    return 100 * summary.became_uncertain / summary.executions if summary.executions else 0.0


def gaps_of(candidate: metrics.Summary, baseline: metrics.Summary) -> list[Gap]:
    """Where ``candidate`` does worse than ``baseline`` (above), or nothing on too little
    traffic."""
    if candidate.keyed_requests < MIN_KEYED or baseline.keyed_requests < MIN_KEYED:
        return []
    gaps = []
    if candidate.duplicate_side_effects > baseline.duplicate_side_effects:
        gaps.append(
            Gap(
                "duplicate_side_effects",
                float(candidate.duplicate_side_effects),
                float(baseline.duplicate_side_effects),
            )
        )
    uncertain = Gap("uncertain_share", uncertain_share(candidate), uncertain_share(baseline))
    if uncertain.difference >= UNCERTAIN_POINTS:
        gaps.append(uncertain)
    dedup = Gap("dedup_hit_rate", 100 * candidate.dedup_hit_rate, 100 * baseline.dedup_hit_rate)
    if abs(dedup.difference) >= DEDUP_POINTS:
        gaps.append(dedup)
    return gaps


def regressions(tenant: Tenant, *, window: timedelta = WINDOW) -> list[Regression]:
    """The tenant's candidates that do worse than its active combination over ``window``."""
    combinations = {
        c.pk: c
        for c in VersionCombination.objects.filter(
            tenant=tenant, state__in=[State.ACTIVE, State.CANARY, State.SHADOW]
        )
    }
    baseline = next((c for c in combinations.values() if c.state == State.ACTIVE), None)
    if baseline is None:
        return []
    summaries = metrics.by_combination(tenant, since=db_now() - window)
    found = []
    for combination in sorted(combinations.values(), key=lambda c: c.pk):
        if combination.pk == baseline.pk:
            continue
        gaps = gaps_of(
            summaries.get(combination.pk, metrics.Summary()),
            summaries.get(baseline.pk, metrics.Summary()),
        )
        if gaps:
            found.append(Regression(combination, baseline, gaps))
    return found
