"""One clock: leases, lapses, expiries and approval deadlines follow PostgreSQL's clock, never
the process's. A process whose clock is an hour ahead or behind moves no record early or late.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from django.db.models.functions import Now
from django.utils import timezone

from ledger import combinations
from ledger.clock import db_now
from ledger.domain import RecordState
from ledger.models import IdempotencyRecord
from ledger.records import (
    Outcome,
    complete_execution,
    expire_leases,
    heartbeat,
)
from tests.api.conftest import client_for
from tests.factories import refresh, reserve

pytestmark = pytest.mark.django_db

SKEWS = [timedelta(hours=1), -timedelta(hours=1)]


@pytest.fixture(params=SKEWS, ids=["ahead", "behind"])
def skewed_process(request, monkeypatch) -> Iterator[timedelta]:
    """This process's clock, as Django reads it (``timezone.now``), off by an hour. (The drill
    ``clock_skew`` moves a whole web process's clock with libfaketime.)"""
    skew: timedelta = request.param
    real_now = timezone.now
    monkeypatch.setattr(timezone, "now", lambda: real_now() + skew)
    yield skew


def test_a_live_lease_is_not_lapsed_by_a_clock_that_runs_ahead_or_behind(
    tenant, create_order, skewed_process
) -> None:
    record = reserve(tenant, create_order).record
    lease = refresh(record).lease_expires_at
    assert lease is not None
    # The lease ends a lease length after the database's now, whatever this process thinks.
    assert timedelta(seconds=50) < lease - db_now() <= timedelta(seconds=60)
    assert expire_leases() == []
    assert refresh(record).state == RecordState.EXECUTING
    again = reserve(tenant, create_order)  # a duplicate is answered wait, not unknown
    assert again.decision == "wait" and refresh(record).state == RecordState.EXECUTING


def test_a_lapsed_lease_lapses_on_time_by_the_database_clock(
    tenant, create_order, skewed_process
) -> None:
    record = reserve(tenant, create_order).record
    IdempotencyRecord.objects.filter(pk=record.pk).update(
        lease_expires_at=Now() - timedelta(seconds=1)
    )
    assert expire_leases() == [record.pk]
    assert refresh(record).state == RecordState.UNKNOWN


def test_a_heartbeat_extends_by_the_database_clock(tenant, create_order, skewed_process) -> None:
    record = reserve(tenant, create_order).record
    until = heartbeat(record=record, fencing_token=1, lease_seconds=600)
    assert timedelta(seconds=590) < until - db_now() <= timedelta(seconds=600)


def test_expiry_of_a_finished_record_is_set_by_the_database_clock(
    tenant, create_order, skewed_process
) -> None:
    record = reserve(tenant, create_order).record
    complete_execution(record=record, fencing_token=1, outcome=Outcome.SUCCEEDED, actor="w")
    done = refresh(record)
    assert done.expires_at is not None
    expected = timedelta(seconds=done.ttl_seconds)
    assert abs(done.expires_at - db_now() - expected) < timedelta(seconds=10)


def test_the_hot_path_grants_leases_by_the_database_clock(tenant, skewed_process) -> None:
    api = client_for(tenant)
    api.start_run()
    first = api.call("create_order", {"cart": "c-1"}, business_object_id="cart-1")
    assert first.json()["decision"] == "execute"
    lease = first.json()["lease"]
    assert lease["seconds"] == 60
    record = IdempotencyRecord.objects.get()
    assert timedelta(seconds=50) < record.lease_expires_at - db_now() <= timedelta(seconds=60)
    again = api.call("create_order", {"cart": "c-1"}, business_object_id="cart-1")
    assert again.status_code == 409 and again.json()["decision"] == "wait"
    assert refresh(record).state == RecordState.EXECUTING


def _combination(tenant, label: str):
    versions = {f: f"{label}-{f}" for f in combinations.FIELDS}
    combination, _ = combinations.create_combination(
        tenant=tenant, label=label, actor="alice", source="console", **versions
    )
    return combination


def test_a_combinations_activation_and_halt_are_timed_by_the_database_clock(
    tenant, skewed_process
) -> None:
    """The latest activation decides which combination a tenant fails closed on
    (``runs.pick_combination``): the order must not depend on which process activated it."""
    combination = _combination(tenant, "baseline")
    before = db_now()
    activated = combinations.activate(
        tenant=tenant, combination_id=combination.pk, actor="alice", source="console"
    )
    halted = combinations.halt(
        tenant=tenant, combination_id=combination.pk, actor="alice", source="console", reason="bad"
    ).combination
    after = db_now()
    assert activated.activated_at is not None and halted.halted_at is not None
    assert before <= activated.activated_at <= after
    assert before <= halted.halted_at <= after


def test_no_module_of_the_service_reads_the_process_clock() -> None:
    """Every time the ledger, the worker and the console decide by or show an age against is
    the database's (``ledger.clock``): none of their modules asks the process for the time.
    (A row's ``created_at``, stamped by Django's ``auto_now_add``, records when, not a
    deadline.)"""
    root = Path(__file__).resolve().parents[2]
    readers = re.compile(r"timezone\.now\(|datetime\.now\(|datetime\.utcnow\(|date\.today\(")
    found = [
        f"{path.relative_to(root)}:{number}"
        for package in ("ledger", "reconcile", "console")
        for path in sorted((root / package).rglob("*.py"))
        if "migrations" not in path.parts
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if readers.search(line)
    ]
    assert found == []


def test_an_approvals_request_time_is_the_databases(tenant, skewed_process) -> None:
    """The on-call service levels count an approval's wait from its ``created_at`` against the
    database's clock (``ledger.notifications``): a skewed web process must not make it look
    an hour older, or younger, than it is."""
    from tests.console.conftest import make_pending

    before = db_now()
    approval = make_pending(tenant)
    after = db_now()
    approval.refresh_from_db()
    assert before <= approval.created_at <= after
    assert approval.expires_at > after
