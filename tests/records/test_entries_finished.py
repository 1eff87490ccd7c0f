"""When a call's ledger entry is finished: once its outcome is known (succeeded or failed), at
the database's time of the transition that settled it, and never while it is uncertain,
whichever way the entry gets there (its own report, the same report again, a lapse of the
lease, a resolution of the unknown record)."""

from __future__ import annotations

import hashlib
from datetime import timedelta

import pytest
from django.db.models.functions import Now

from ledger.models import IdempotencyRecord, LedgerEntry, Tenant, Tool
from ledger.records import Outcome, complete_execution, expire_leases, resolve_unknown
from tests.api.conftest import client_for
from tests.factories import make_entry, make_tool, refresh, reserve

pytestmark = pytest.mark.django_db


def _started_entry(tenant: Tenant, tool: Tool, record: IdempotencyRecord) -> LedgerEntry:
    """The entry of the call that started ``record``, waiting for its executor's report."""
    entry = make_entry(tenant, tool, status="started")
    LedgerEntry.objects.filter(pk=entry.pk).update(record=record, fencing_token=1)
    return LedgerEntry.objects.get(pk=entry.pk)


def _report(record: IdempotencyRecord, outcome: Outcome, entry: LedgerEntry | None) -> None:
    error = {"code": "DECLINED", "message": "no"} if outcome is Outcome.FAILED else None
    complete_execution(
        record=record, fencing_token=1, outcome=outcome, actor="w", error=error, entry=entry
    )


@pytest.mark.parametrize(
    ("outcome", "status"),
    [(Outcome.SUCCEEDED, "succeeded"), (Outcome.FAILED, "failed")],
)
def test_a_known_outcome_reported_finishes_the_entry_when_the_record_settles(
    tenant, create_order, outcome: Outcome, status: str
) -> None:
    record = reserve(tenant, create_order).record
    entry = _started_entry(tenant, create_order, record)
    _report(record, outcome, entry)
    finished = LedgerEntry.objects.get(pk=entry.pk)
    assert finished.status == status
    assert finished.finished_at == refresh(record).updated_at


def test_an_uncertain_report_leaves_the_entry_unfinished(tenant, create_order) -> None:
    record = reserve(tenant, create_order).record
    entry = _started_entry(tenant, create_order, record)
    _report(record, Outcome.UNCERTAIN, entry)
    uncertain = LedgerEntry.objects.get(pk=entry.pk)
    assert (uncertain.status, uncertain.finished_at) == ("uncertain", None)


@pytest.mark.parametrize(
    ("outcome", "status", "finished"),
    [(Outcome.UNCERTAIN, "uncertain", False), (Outcome.FAILED, "failed", True)],
)
def test_the_same_report_again_with_its_entry_finishes_the_entry_only_when_the_outcome_is_known(
    tenant, create_order, outcome: Outcome, status: str, finished: bool
) -> None:
    """The first report came without the entry (its response lost); the retry names it."""
    record = reserve(tenant, create_order).record
    entry = _started_entry(tenant, create_order, record)
    _report(record, outcome, None)
    _report(record, outcome, entry)
    after = LedgerEntry.objects.get(pk=entry.pk)
    assert after.status == status
    assert (after.finished_at is not None) is finished


def test_a_lapsed_lease_leaves_the_started_entries_unfinished(tenant, create_order) -> None:
    record = reserve(tenant, create_order).record
    entry = _started_entry(tenant, create_order, record)
    IdempotencyRecord.objects.filter(pk=record.pk).update(
        lease_expires_at=Now() - timedelta(seconds=1)
    )
    assert expire_leases() == [record.pk]
    uncertain = LedgerEntry.objects.get(pk=entry.pk)
    assert (uncertain.status, uncertain.finished_at) == ("uncertain", None)


@pytest.mark.parametrize(
    ("outcome", "status"),
    [(Outcome.SUCCEEDED, "succeeded"), (Outcome.FAILED, "failed")],
)
def test_a_resolution_finishes_the_uncertain_entries_when_it_settles_the_record(
    tenant, create_order, outcome: Outcome, status: str
) -> None:
    record = reserve(tenant, create_order).record
    entry = _started_entry(tenant, create_order, record)
    _report(record, Outcome.UNCERTAIN, entry)
    error = {"code": "NOT_EXECUTED", "message": "not there"} if outcome is Outcome.FAILED else None
    resolve_unknown(
        record=record, outcome=outcome, actor="look-up", result={"id": 1}, error=error, detail=""
    )
    settled = LedgerEntry.objects.get(pk=entry.pk)
    assert settled.status == status
    assert settled.finished_at == refresh(record).updated_at


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def _entry(call: dict) -> LedgerEntry:
    return LedgerEntry.objects.get(call_id=call["call_id"])


def test_a_replay_answered_with_the_recorded_result_is_entered_as_a_duplicate_is(
    tenant, create_order
) -> None:
    """A retry and a duplicate given the recorded result are the same kind of entry: finished,
    in the status of the outcome they were given."""
    api = client_for(tenant)
    api.start_run()
    first = api.call("create_order", {"cart": "c-1"}).json()
    api.post(
        f"/calls/{first['call_id']}/complete",
        {"fencing_token": 1, "outcome": "succeeded", "result": {"id": "o-1"}},
    )
    replay = api.post(f"/calls/{first['call_id']}/replay", {}).json()
    duplicate = api.call("create_order", {"cart": "c-1"}).json()
    assert replay["decision"] == duplicate["decision"] == "recorded_result"
    for entry in (_entry(replay), _entry(duplicate)):
        assert entry.status == "succeeded" and entry.finished_at is not None


def test_a_replay_that_finds_the_write_applied_is_entered_succeeded(tenant) -> None:
    make_tool(tenant, "write_file")
    api = client_for(tenant)
    api.start_run()
    plan = {"workspace": "repo", "path": "a.py", "before_hash": _sha("a"), "after_hash": _sha("b")}
    first = api.call("write_file", {"path": "a.py"}, write_plan=plan).json()
    api.post(f"/calls/{first['call_id']}/complete", {"fencing_token": 1, "outcome": "uncertain"})
    replay = api.post(f"/calls/{first['call_id']}/replay", {"current_hash": _sha("b")}).json()
    assert replay["observation"]["code"] == "ALREADY_APPLIED"
    entry = _entry(replay)
    assert entry.status == "succeeded" and entry.finished_at is not None
