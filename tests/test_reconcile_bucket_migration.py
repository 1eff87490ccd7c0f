"""Migration 0027 folds the reconciliation attempts the rollup's cursor has already passed
into buckets; the rollup folds the rest, so each attempt counts once."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.db.models import Sum
from django.utils import timezone

from ledger.models import ReconcileBucket
from ledger.services import metrics

pytestmark = pytest.mark.django_db(transaction=True)
BEFORE = [("ledger", "0026_mcp_server_implementation")]
AFTER = [("ledger", "0027_reconcile_buckets")]


def _migrate(targets: list[tuple[str, str]]) -> Any:
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(targets)
    return executor.loader.project_state(targets).apps


def _migrate_to_latest() -> None:
    """Every app at its newest migration again, for the tests after this one."""
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(executor.loader.graph.leaf_nodes())


def test_attempts_behind_the_cursor_are_backfilled_and_the_rest_rolled_up() -> None:
    apps = _migrate(BEFORE)
    try:
        Tenant = apps.get_model("ledger", "Tenant")
        AuditEvent = apps.get_model("ledger", "AuditEvent")
        MetricCursor = apps.get_model("ledger", "MetricCursor")
        tenant = Tenant.objects.create(slug="acme", name="Acme")

        def attempt(outcome: str) -> int:
            event = AuditEvent.objects.create(
                tenant=tenant,
                actor="worker:w1",
                action="reconcile.attempt",
                target_type="idempotencyrecord",
                target_id="41",
                after={"attempt": 1, "outcome": outcome},
                source="worker",
            )
            return int(event.pk)

        attempt("unreachable")
        passed = attempt("found")
        MetricCursor.objects.create(name="record_events", last_id=passed)
        attempt("found")  # after the cursor: the rollup's

        _migrate(AFTER)
        backfilled = dict(
            ReconcileBucket.objects.values_list("outcome").annotate(n=Sum("attempts"))
        )
        assert backfilled == {"unreachable": 1, "found": 1}
        start = ReconcileBucket.objects.values_list("bucket_start", flat=True).first()
        assert start is not None and timezone.now() - start < timedelta(minutes=5)
        assert start == metrics.bucket_of(start)
    finally:
        _migrate_to_latest()
    metrics.roll_up()
    totals = dict(ReconcileBucket.objects.values_list("outcome").annotate(n=Sum("attempts")))
    assert totals == {"unreachable": 1, "found": 2}
