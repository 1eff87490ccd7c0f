"""The metrics dashboard and the combinations list read their window from the URL: the last
hour, 6 hours, 24 hours (the default) or 7 days, in 5-minute buckets and hourly over 7 days;
a window that is not one of those is refused on the page and the default shown."""

from __future__ import annotations

import csv
import io
from datetime import timedelta

import pytest

from ledger.clock import db_now
from ledger.models import MetricBucket
from ledger.services import metrics
from tests.console.conftest import make_user, signed_in

HOUR = 3600


def _bucket(tenant, combination, age: timedelta, **counts) -> None:
    MetricBucket.objects.create(
        tenant=tenant,
        combination=combination,
        tool_name="create_order",
        bucket_start=metrics.bucket_of(db_now() - age),
        **counts,
    )


@pytest.fixture
def history(tenant, combos):
    """Traffic of the active combination 20 minutes, 3 hours and 3 days ago."""
    _good, bad = combos
    for age, requests in ((timedelta(minutes=20), 4), (timedelta(hours=3), 6)):
        _bucket(tenant, bad, age, keyed_requests=requests, dedup_hits=1)
    for minutes in (0, 5, 10):  # three buckets in one hour, three days ago
        _bucket(tenant, bad, timedelta(days=3, minutes=minutes), keyed_requests=2, dedup_hits=2)
    return bad


@pytest.mark.parametrize(
    ("chosen", "seconds", "points"),
    [("1h", HOUR, 1), ("6h", 6 * HOUR, 2), ("24h", 24 * HOUR, 2), ("", 24 * HOUR, 2)],
)
def test_the_charts_span_the_chosen_window_in_5_minute_buckets(
    django_user_model, tenant, history, chosen, seconds, points
) -> None:
    manager = signed_in(make_user(django_user_model, "mgr", tenant, "manager"))
    page = manager.get("/metrics/", {"range": chosen}, secure=True)
    assert page.status_code == 200
    for chart in page.context["charts"]:
        data = chart.data()
        assert data["end"] - data["start"] == seconds
        assert len(data["times"]) == points
        assert all(t % 300 == 0 for t in data["times"])


def test_seven_days_are_drawn_hourly_with_an_hours_buckets_summed(
    django_user_model, tenant, history
) -> None:
    manager = signed_in(make_user(django_user_model, "mgr", tenant, "manager"))
    page = manager.get("/metrics/", {"range": "7d"}, secure=True)
    dedup = page.context["charts"][0].data()
    assert dedup["end"] - dedup["start"] == 7 * 24 * HOUR
    assert all(t % HOUR == 0 for t in dedup["times"])
    # The three buckets of three days ago are one hourly point: 6 hits of 6 requests.
    (values,) = [series["values"] for series in dedup["series"]]
    assert values[0] == 100.0
    assert "hourly" in page.content.decode()


def test_a_window_that_is_not_offered_is_refused_on_the_page(
    django_user_model, tenant, history
) -> None:
    manager = signed_in(make_user(django_user_model, "mgr", tenant, "manager"))
    page = manager.get("/metrics/", {"range": "90d"}, secure=True)
    assert page.status_code == 200
    assert "90d is not one of the available choices" in page.content.decode()
    data = page.context["charts"][0].data()
    assert data["end"] - data["start"] == 24 * HOUR


@pytest.mark.parametrize(("chosen", "requests"), [("1h", 4), ("24h", 10), ("7d", 16)])
def test_the_combinations_list_sums_the_chosen_window(
    django_user_model, tenant, history, chosen, requests
) -> None:
    manager = signed_in(make_user(django_user_model, "mgr", tenant, "manager"))
    page = manager.get("/combinations/", {"range": chosen}, secure=True)
    assert page.status_code == 200
    summaries = {combination.pk: summary for combination, summary, _ in page.context["rows"]}
    assert summaries[history.pk].keyed_requests == requests
    export = manager.get("/combinations/", {"range": chosen, "format": "csv"}, secure=True)
    rows = csv.DictReader(io.StringIO(b"".join(export.streaming_content).decode()))
    exported = {row["combination_id"]: row["keyed_requests"] for row in rows}
    assert exported[str(history.pk)] == str(requests)


def test_the_threshold_forms_metrics_are_in_the_users_language(django_user_model, tenant):
    from console.models import Preferences

    manager = make_user(django_user_model, "mgr", tenant, "manager")
    Preferences.objects.create(user=manager, language="zh-hans")
    page = signed_in(manager).get("/metrics/", secure=True).content.decode()
    assert '<option value="dedup_hit_rate">去重命中率</option>' in page
    assert "Dedup Hit Rate" not in page
