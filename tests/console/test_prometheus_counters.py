"""/metrics counters never go down: a TTL cleanup that deletes settled records, and with them
their reconciliation attempts, lowers no sample of any counter family."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.test import Client
from django.utils import timezone
from prometheus_client.parser import text_string_to_metric_families

from ledger.domain import RecordState
from ledger.models import IdempotencyRecord, Tenant, Tool
from ledger.services import metrics
from ledger.services.cleanup import cleanup_expired_records
from reconcile.adapters import LookupOutcome, LookupResult
from reconcile.models import DownstreamAdapter, ReconcileAttempt
from reconcile.services import reconcile_record
from tests.api.conftest import client_for

pytestmark = pytest.mark.django_db

TOKEN = "scrape-secret"


class _Found:
    """A downstream that has every order it is asked about."""

    def lookup(self, *, idempotency_key: str, tool: str) -> LookupResult:
        return LookupResult(LookupOutcome.FOUND, "found", {"id": idempotency_key[-2:]})


FOUND = _Found()


def _counters() -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """Every sample of every counter family, by name and labels."""
    response = Client().get("/metrics", secure=True, headers={"Authorization": f"Bearer {TOKEN}"})
    assert response.status_code == 200
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(response.content.decode())
        if family.type == "counter"
        for sample in family.samples
    }


def _lost_calls(tenant: Tenant, tool: str, count: int) -> list[int]:
    """``count`` calls of ``tool`` whose outcome was lost: their records' ids."""
    api = client_for(tenant)
    api.start_run(f"run-{tool}")
    for n in range(count):
        answer = api.call(tool, {"cart": n}, run_id=f"run-{tool}", business_object_id=f"c{n}")
        api.post(
            f"/calls/{answer.json()['call_id']}/complete",
            {"fencing_token": 1, "outcome": "uncertain"},
        )
    return list(
        IdempotencyRecord.objects.filter(tenant=tenant, tool__name=tool).values_list(
            "pk", flat=True
        )
    )


@pytest.fixture
def looked_up(tenant: Tenant, settings: Any) -> list[int]:
    """Three lost orders a look-up found (settled), and one call nothing can look up (still
    unknown): each with its reconciliation attempt."""
    settings.METRICS_TOKEN = TOKEN
    settings.LEDGER_ADAPTER_MODULES = [__name__]
    orders = _lost_calls(tenant, "create_order", 3)
    DownstreamAdapter.objects.create(
        tenant=tenant,
        tool=Tool.objects.get(tenant=tenant, name="create_order"),
        kind=DownstreamAdapter.Kind.PYTHON,
        python_path=f"{__name__}:FOUND",
        grace_seconds=0,
    )
    for pk in orders:
        assert reconcile_record(pk, worker="w1") == "succeeded"
    (unchecked,) = _lost_calls(tenant, "send_email", 1)
    reconcile_record(unchecked, worker="w1")
    assert ReconcileAttempt.objects.count() == 4
    return orders


def test_no_counter_goes_down_when_cleanup_deletes_records(looked_up: list[int]) -> None:
    metrics.roll_up()
    before = _counters()
    assert any(name.startswith("agent_ledger_reconcile_attempts") for name, _ in before)

    IdempotencyRecord.objects.filter(pk__in=looked_up, state=RecordState.SUCCEEDED).update(
        expires_at=timezone.now() - timedelta(seconds=1)
    )
    assert cleanup_expired_records() == 3
    assert ReconcileAttempt.objects.count() == 1  # the rows went with their records
    metrics.roll_up()
    after = _counters()

    lowered = {
        key: (value, after.get(key)) for key, value in before.items() if after.get(key, 0) < value
    }
    assert lowered == {}


def test_the_reconcile_attempts_counted_before_a_cleanup_stay_counted(
    looked_up: list[int],
) -> None:
    metrics.roll_up()
    IdempotencyRecord.objects.filter(pk__in=looked_up).update(
        expires_at=timezone.now() - timedelta(seconds=1)
    )
    cleanup_expired_records()
    metrics.roll_up()
    attempts = {
        dict(labels)["outcome"]: value
        for (name, labels), value in _counters().items()
        if name == "agent_ledger_reconcile_attempts_total"
    }
    assert attempts == {"found": 3, "no_check": 1}
