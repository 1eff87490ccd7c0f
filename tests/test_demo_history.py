"""The demo's day of history: metric buckets before its own runs, so the dashboard's default
range has a shape, with the candidate combination visibly worse."""

from __future__ import annotations

from datetime import timedelta

import pytest

from console.management.commands.demo_agent import backfill_history
from ledger import combinations
from ledger.clock import db_now
from ledger.models import MetricBucket
from ledger.services import metrics
from tests.factories import make_tenant

pytestmark = pytest.mark.django_db

VERSIONS = {"model": "m", "prompt": "p", "rules": "r", "tool_schema": "t", "data_version": "d"}


def test_the_history_fills_the_day_before_the_demo_and_shows_the_regression() -> None:
    tenant = make_tenant("demo")
    made = {
        label: combinations.create_combination(
            tenant=tenant, label=label, actor="x", source="cli", **{**VERSIONS, "prompt": label}
        )[0]
        for label in ("baseline", "candidate")
    }
    now = db_now()
    added = backfill_history(tenant, made, until=now)
    assert backfill_history(tenant, made, until=now) == added  # again: nothing is doubled
    assert MetricBucket.objects.count() == added
    series = metrics.series_by_combination(tenant, since=metrics.window_start(24 * 60))
    baseline, candidate = series[made["baseline"].pk], series[made["candidate"].pk]
    assert len(baseline) >= 12 and len(candidate) >= 12
    assert max(p["bucket_start"] for p in baseline) < metrics.bucket_of(now)  # the demo's own
    assert min(p["bucket_start"] for p in candidate) >= now - timedelta(hours=6, minutes=5)

    def rate(points: list[dict], field: str) -> float:
        return sum(p[field] for p in points) / len(points)

    assert rate(candidate, "dedup_hit_rate") < rate(baseline, "dedup_hit_rate")
    assert rate(candidate, "became_uncertain") > rate(baseline, "became_uncertain")
