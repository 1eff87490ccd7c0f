"""What the record transitions write besides the state: counters, the run and combination of a
new record, the evidence of a resolution, the audit trail and the log of a sweep, and the
sweep's skipping of rows another caller holds. Each test here stands behind a detail that
``make mutate`` showed no other test noticed (docs/testing.md)."""

from __future__ import annotations

import logging
import threading
from datetime import timedelta

import pytest
from django.db import connections, transaction
from django.utils import timezone

from ledger import combinations
from ledger.domain import RecordState, ReplayPolicy
from ledger.errors import InvalidTransition, LeaseExpired, RecordSettled, StaleFencingToken
from ledger.models import AuditEvent, IdempotencyRecord
from ledger.records import (
    Outcome,
    answer_as_seen,
    complete_execution,
    expire_leases,
    heartbeat,
    lock_record,
    resolve_locked,
    resolve_unknown,
)
from tests.api.conftest import client_for
from tests.factories import make_tenant, make_tool, refresh, reserve

pytestmark = pytest.mark.django_db


def test_each_duplicate_is_counted_once_on_the_record_it_is_answered_from(
    tenant, create_order
) -> None:
    reserve(tenant, create_order)
    for hits in (1, 2, 3):
        duplicate = reserve(tenant, create_order, owner="w2")
        assert duplicate.created is False
        assert duplicate.record.duplicate_hits == hits
        assert refresh(duplicate.record).duplicate_hits == hits


@pytest.mark.parametrize("registered", [True, False], ids=["one_statement", "general_way"])
def test_a_first_call_records_its_run_and_combination(tenant, registered: bool) -> None:
    """A registered tool's first call takes the one-statement way, another the general one."""
    if registered:
        make_tool(tenant, "create_order")
    combination, _ = combinations.create_combination(
        tenant=tenant,
        label="c",
        actor="t",
        source="api",
        model="m",
        prompt="p",
        rules="r",
        tool_schema="t",
        data_version="d",
    )
    combinations.activate(tenant=tenant, combination_id=combination.pk, actor="t", source="api")
    api = client_for(tenant)
    api.start_run()
    first = api.call("create_order", {"cart": 1}, business_object_id="c1").json()
    record = IdempotencyRecord.objects.get(key=first["idempotency_key"])
    assert record.run.run_id == "run-1" and record.combination_id == combination.pk
    assert (record.state, record.fencing_token, record.executions) == ("executing", 1, 1)


def test_resolving_keeps_the_evidence_and_the_error(tenant, create_order) -> None:
    found = reserve(tenant, create_order, key="k-found").record
    gone = reserve(tenant, create_order, key="k-gone").record
    for record in (found, gone):
        complete_execution(record=record, fencing_token=1, outcome=Outcome.UNCERTAIN, actor="w")
    resolve_unknown(
        record=found,
        outcome=Outcome.SUCCEEDED,
        actor="operator",
        result={"order": "o-1"},
        detail="found it",
    )
    resolve_unknown(
        record=gone,
        outcome=Outcome.FAILED,
        actor="operator",
        error={"code": "NOT_EXECUTED", "message": "not there"},
        detail="not there",
    )
    assert refresh(found).result == {"order": "o-1"}
    assert refresh(gone).error == {"code": "NOT_EXECUTED", "message": "not there"}
    assert refresh(gone).error_retryable is True


def test_resolving_needs_a_known_outcome(tenant, create_order) -> None:
    record = reserve(tenant, create_order).record
    complete_execution(record=record, fencing_token=1, outcome=Outcome.UNCERTAIN, actor="w")
    with pytest.raises(InvalidTransition, match=r"^resolving needs a known outcome$"):
        resolve_unknown(record=record, outcome=Outcome.UNCERTAIN, actor="o", detail="?")
    assert refresh(record).state == RecordState.UNKNOWN


def test_a_key_conflict_is_audited_with_its_reason(tenant, create_order) -> None:
    reserve(tenant, create_order)
    reserve(tenant, create_order, params={"cart": "other"}, owner="w2")
    event = AuditEvent.objects.get(action="record.key_conflict")
    assert event.detail == "Same idempotency key with a different request fingerprint."
    assert (event.actor, event.outcome, event.tenant_id) == ("w2", "denied", tenant.pk)


def _lapse(record: IdempotencyRecord) -> None:
    IdempotencyRecord.objects.filter(pk=record.pk).update(
        lease_expires_at=timezone.now() - timedelta(seconds=1)
    )


def test_a_sweep_is_audited_as_the_system_and_logged(tenant, create_order, caplog) -> None:
    record = reserve(tenant, create_order).record
    _lapse(record)
    with caplog.at_level(logging.INFO, logger="ledger.records.lease"):
        assert expire_leases() == [record.pk]
    event = AuditEvent.objects.get(action="record.lease_expired")
    assert (event.actor, event.source) == ("system", "worker")
    logged = [r for r in caplog.records if r.getMessage() == "lease sweep"]
    assert [r.expired for r in logged] == [1]  # type: ignore[attr-defined]


@pytest.mark.django_db(transaction=True)
def test_a_sweep_skips_a_record_another_caller_holds() -> None:
    """A completing caller holds the record's row lock: the sweep takes the rest of the batch
    and leaves that one for later, instead of waiting for it."""
    tenant = make_tenant("skip")
    tool = make_tool(tenant, "create_order")
    held = reserve(tenant, tool, key="k-held").record
    free = reserve(tenant, tool, key="k-free").record
    for record in (held, free):
        _lapse(record)
    locked, release = threading.Event(), threading.Event()

    def hold() -> None:
        try:
            with transaction.atomic():
                lock_record(held.pk)
                locked.set()
                release.wait(timeout=30)
        finally:
            connections.close_all()

    holder = threading.Thread(target=hold)
    holder.start()
    try:
        assert locked.wait(timeout=30)
        assert expire_leases() == [free.pk]
    finally:
        release.set()
        holder.join(timeout=30)
    assert expire_leases() == [held.pk]


def test_a_resolution_is_audited_with_its_evidence_text(tenant, create_order) -> None:
    record = reserve(tenant, create_order).record
    complete_execution(record=record, fencing_token=1, outcome=Outcome.UNCERTAIN, actor="w")
    resolve_unknown(record=record, outcome=Outcome.SUCCEEDED, actor="op", detail="order o-1")
    event = AuditEvent.objects.get(action="record.resolved_succeeded")
    assert (event.actor, event.detail) == ("op", "order o-1")


def test_only_an_unknown_record_is_resolved(tenant, create_order) -> None:
    record = reserve(tenant, create_order).record
    with pytest.raises(
        InvalidTransition,
        match=r"^a record cannot go from executing to failed_final \(resolved_failed\)$",
    ):
        resolve_unknown(record=record, outcome=Outcome.FAILED, actor="op", detail="no")
    with transaction.atomic():
        locked, _now = lock_record(record.pk)
        with pytest.raises(InvalidTransition, match=r"^resolving needs a known outcome$"):
            resolve_locked(
                locked,
                outcome=Outcome.UNCERTAIN,
                actor="op",
                source="console",
                detail="?",
                now=timezone.now(),
            )
    assert refresh(record).state == RecordState.EXECUTING


def test_a_duplicate_answered_as_seen_is_told_to_wait(tenant, create_order) -> None:
    seen = refresh(reserve(tenant, create_order).record)
    answer = answer_as_seen(
        seen,
        fingerprint=seen.fingerprint,
        replay_policy=ReplayPolicy(create_order.replay_policy),
        lapsed=False,
    )
    assert answer is not None and answer.next_action == "wait"


def test_a_final_error_code_is_never_replayed_even_when_reported_retryable(
    tenant, read_file
) -> None:
    record = reserve(tenant, read_file, key="k-read").record
    complete_execution(
        record=record,
        fencing_token=1,
        outcome=Outcome.FAILED,
        actor="w",
        error={"code": "PERMISSION_DENIED", "message": "no"},
        retryable=True,
    )
    again = reserve(tenant, read_file, key="k-read", owner="w2")
    assert again.decision.value == "recorded_result"
    assert refresh(record).executions == 1


def test_a_heartbeat_extends_only_its_own_record_by_the_lease_asked_for(
    tenant, create_order
) -> None:
    mine = reserve(tenant, create_order, key="k-mine").record
    other = reserve(tenant, create_order, key="k-other").record
    before = refresh(mine)
    other_lease = refresh(other).lease_expires_at
    until = heartbeat(record=mine, fencing_token=1, lease_seconds=3600)
    after = refresh(mine)
    assert after.lease_expires_at == until
    assert timedelta(seconds=3590) < until - timezone.now() <= timedelta(seconds=3600)
    assert after.updated_at > before.updated_at
    assert refresh(other).lease_expires_at == other_lease


def test_heartbeat_refusals_say_why(tenant, create_order) -> None:
    record = reserve(tenant, create_order).record
    with pytest.raises(StaleFencingToken, match=r"^another caller holds this record now$"):
        heartbeat(record=record, fencing_token=2)
    _lapse(record)
    with pytest.raises(
        LeaseExpired, match=r"^the lease lapsed; the outcome is unknown and will be reconciled$"
    ):
        heartbeat(record=record, fencing_token=1)


def test_a_heartbeat_for_a_settled_record_has_no_lease_to_extend(tenant, create_order) -> None:
    record = reserve(tenant, create_order).record
    complete_execution(record=record, fencing_token=1, outcome=Outcome.SUCCEEDED, actor="w")
    with pytest.raises(InvalidTransition, match=r"^the record is succeeded; there is no lease"):
        heartbeat(record=record, fencing_token=1)


def test_a_refused_report_is_audited_in_the_records_tenant_with_both_tokens(
    tenant, read_file
) -> None:
    first = reserve(tenant, read_file, key="k-read").record
    complete_execution(record=first, fencing_token=1, outcome=Outcome.UNCERTAIN, actor="w")
    reserve(tenant, read_file, key="k-read", owner="w2")
    with pytest.raises(
        StaleFencingToken, match=r"^fencing token 1 is stale \(current is 2\)$"
    ) as refused:
        complete_execution(record=first, fencing_token=1, outcome=Outcome.SUCCEEDED, actor="w")
    assert str(refused.value) == "fencing token 1 is stale (current is 2)"
    event = AuditEvent.objects.get(action="record.complete_refused")
    assert event.tenant_id == tenant.pk and event.actor == "w"
    assert event.detail == "token 1 reported succeeded; record is executing with token 2"


def test_a_report_for_a_settled_record_is_refused_with_its_state(tenant, create_order) -> None:
    record = reserve(tenant, create_order).record
    complete_execution(record=record, fencing_token=1, outcome=Outcome.SUCCEEDED, actor="w")
    with pytest.raises(RecordSettled, match=r"the record is succeeded"):
        complete_execution(
            record=record, fencing_token=1, outcome=Outcome.FAILED, actor="w", error={"code": "X"}
        )


def test_a_resolution_redacts_what_it_keeps(tenant, create_order) -> None:
    found = reserve(tenant, create_order, key="k-found").record
    gone = reserve(tenant, create_order, key="k-gone").record
    for record in (found, gone):
        complete_execution(record=record, fencing_token=1, outcome=Outcome.UNCERTAIN, actor="w")
    resolve_unknown(
        record=found,
        outcome=Outcome.SUCCEEDED,
        actor="op",
        result={"token": "secret-value", "email": "bob@example.com"},
        detail="found",
    )
    resolve_unknown(
        record=gone,
        outcome=Outcome.FAILED,
        actor="op",
        result={"order": "ignored"},
        error={"code": "NOT_EXECUTED", "token": "secret-value"},
        detail="gone",
    )
    kept = refresh(found).result
    assert kept["token"] == "[REDACTED]" and "bob@example.com" not in kept["email"]
    assert refresh(gone).result is None
    assert refresh(gone).error["token"] == "[REDACTED]"
