"""Lease expiry makes records unknown (never reserved); cleanup only removes expired terminals."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest
from django.contrib.auth import get_user_model
from django.db import connections
from django.utils import timezone

from console.models import ApprovalClaim
from ledger.domain import RecordState
from ledger.models import ApprovalRequest, AuditEvent, IdempotencyRecord, LedgerEntry
from ledger.records import Outcome, complete_execution, expire_leases
from ledger.services import cleanup
from ledger.services.cleanup import cleanup_expired_records
from ledger.signals import records_became_unknown
from reconcile.models import ReconcileAttempt
from tests.factories import make_entry, make_tenant, make_tool, refresh, reserve


def _lapse(record: IdempotencyRecord) -> None:
    IdempotencyRecord.objects.filter(pk=record.pk).update(
        lease_expires_at=timezone.now() - timedelta(seconds=5)
    )


@pytest.mark.django_db
def test_expired_lease_becomes_unknown_never_reserved(tenant, create_order) -> None:
    lapsed = reserve(tenant, create_order, key="k-lapsed").record
    alive = reserve(tenant, create_order, key="k-alive").record
    _lapse(lapsed)
    assert expire_leases() == [lapsed.pk]
    assert refresh(lapsed).state == RecordState.UNKNOWN
    assert refresh(lapsed).lease_owner == "" and refresh(lapsed).expires_at is None
    assert refresh(alive).state == RecordState.EXECUTING
    event = AuditEvent.objects.get(action="record.lease_expired")
    assert event.before["state"] == "executing" and event.after["state"] == "unknown"


@pytest.mark.django_db
def test_a_sweep_announces_its_batch_for_reconciliation_once(tenant, create_order) -> None:
    """So that the look-ups of a batch share messages (``RECONCILE_TASK_RECORDS`` to one)."""
    records = [reserve(tenant, create_order, key=f"k-{i}").record for i in range(3)]
    for record in records:
        _lapse(record)
    announced: list[list[int]] = []

    def heard(sender: object, record_ids: list[int], **kwargs: object) -> None:
        announced.append(list(record_ids))

    records_became_unknown.connect(heard, weak=False)
    try:
        expired = expire_leases()
    finally:
        records_became_unknown.disconnect(heard)
    assert sorted(expired) == sorted(r.pk for r in records)
    assert announced == [expired]


@pytest.mark.django_db(transaction=True)
def test_two_concurrent_sweepers_expire_each_record_exactly_once() -> None:
    tenant = make_tenant("sweep")
    tool = make_tool(tenant, "create_order")
    records = [reserve(tenant, tool, key=f"k-{i}").record for i in range(40)]
    for record in records:
        _lapse(record)
    swept: list[list[int]] = []

    def sweep() -> None:
        try:
            while batch := expire_leases(batch_size=5):
                swept.append(batch)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=sweep) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    ids = [pk for batch in swept for pk in batch]
    assert sorted(ids) == sorted(r.pk for r in records)
    assert AuditEvent.objects.filter(action="record.lease_expired").count() == 40


@pytest.mark.django_db
def test_cleanup_deletes_only_expired_terminal_records_in_batches(tenant, create_order) -> None:
    def finished(key: str, outcome: Outcome, *, expired: bool) -> IdempotencyRecord:
        record = reserve(tenant, create_order, key=key).record
        complete_execution(
            record=record,
            fencing_token=1,
            outcome=outcome,
            actor="w",
            error={"code": "X"} if outcome is Outcome.FAILED else None,
        )
        if expired:
            IdempotencyRecord.objects.filter(pk=record.pk).update(
                expires_at=timezone.now() - timedelta(seconds=1)
            )
        return record

    expired = [finished(f"done-{i}", Outcome.SUCCEEDED, expired=True) for i in range(5)]
    expired.append(finished("failed", Outcome.FAILED, expired=True))
    fresh = finished("fresh", Outcome.SUCCEEDED, expired=False)
    unknown = finished("unknown", Outcome.UNCERTAIN, expired=False)
    executing = reserve(tenant, create_order, key="executing").record
    _lapse(executing)  # even a lapsed lease is not cleanup's business
    reserved = reserve(tenant, create_order, key="reserved", requires_approval=True).record

    assert cleanup_expired_records(batch_size=4) == 6
    remaining = set(IdempotencyRecord.objects.values_list("key", flat=True))
    assert remaining == {"fresh", "unknown", "executing", "reserved"}
    assert AuditEvent.objects.filter(action="records.cleaned_up").count() == 2  # 4 + 2
    assert {fresh.pk, unknown.pk, executing.pk, reserved.pk} <= set(
        IdempotencyRecord.objects.values_list("pk", flat=True)
    )


def _with_dependents(tenant, tool, key: str) -> tuple[IdempotencyRecord, ApprovalRequest]:
    """A succeeded record with what points at it: its ledger entry, an approval (with an
    approver's claim on it) and a reconciliation attempt."""
    record = reserve(tenant, tool, key=key).record
    complete_execution(record=record, fencing_token=1, outcome=Outcome.SUCCEEDED, actor="w")
    entry = make_entry(tenant, tool, status="succeeded")
    LedgerEntry.objects.filter(pk=entry.pk).update(record=record)
    approval = ApprovalRequest.objects.create(
        tenant=tenant,
        record=record,
        entry=entry,
        action_hash="0" * 64,
        state=ApprovalRequest.State.CONSUMED,
        requested_by="agent",
        expires_at=timezone.now(),
    )
    approver = get_user_model().objects.create_user(username=f"approver-{key}")
    ApprovalClaim.objects.create(approval=approval, user=approver, claimed_at=timezone.now())
    ReconcileAttempt.objects.create(
        tenant=tenant,
        record=record,
        attempt=1,
        kind=ReconcileAttempt.Kind.DOWNSTREAM,
        outcome=ReconcileAttempt.Answer.FOUND,
        worker="w",
    )
    return record, approval


@pytest.mark.django_db
def test_cleanup_keeps_the_ledger_and_drops_what_only_served_the_record(
    tenant, create_order
) -> None:
    """Entries are the ledger: they stay, unlinked. A record's approvals and reconciliation
    attempts go with it. Nothing of a record that has not expired is touched."""
    doomed, _ = _with_dependents(tenant, create_order, "doomed")
    kept, kept_approval = _with_dependents(tenant, create_order, "kept")
    IdempotencyRecord.objects.filter(pk=doomed.pk).update(
        expires_at=timezone.now() - timedelta(seconds=1)
    )
    entries = LedgerEntry.objects.count()

    assert cleanup_expired_records() == 1

    assert not IdempotencyRecord.objects.filter(pk=doomed.pk).exists()
    assert LedgerEntry.objects.count() == entries
    assert set(LedgerEntry.objects.values_list("record_id", flat=True)) == {None, kept.pk}
    assert set(ApprovalRequest.objects.values_list("record_id", flat=True)) == {kept.pk}
    assert set(ReconcileAttempt.objects.values_list("record_id", flat=True)) == {kept.pk}
    assert set(ApprovalClaim.objects.values_list("approval_id", flat=True)) == {kept_approval.pk}
    event = AuditEvent.objects.get(action="records.cleaned_up")
    assert event.after == {"deleted": 1}
    assert event.target_id == f"{doomed.pk}-{doomed.pk}"


def test_a_relation_cleanup_cannot_follow_in_sql_is_an_error_not_a_row_left_behind() -> None:
    """The one-statement delete follows every relation Django's delete would; one it cannot
    express (here a PROTECT of a user: a token's owner, an approval's requester or decider,
    were users cleaned up) is refused when the statement is built, naming the field."""
    from django.core.exceptions import ImproperlyConfigured

    with pytest.raises(
        ImproperlyConfigured,
        match=r"ledger\.(ApiToken\.user|ApprovalRequest\.\w+) is on_delete=PROTECT",
    ):
        cleanup._on_delete(get_user_model()._meta, "doomed", set())


@pytest.mark.parametrize(
    "label", ["ledger.IdempotencyRecord", "ledger.ApprovalRequest", "auth.User"]
)
def test_the_cleanup_follows_every_relation_django_s_delete_would(label) -> None:
    """The relations the one-statement delete follows are read through the documented
    ``_meta.get_fields``; Django's delete collects its own (an undocumented helper). Were the
    two to differ in a Django release, a record's dependents could be left behind."""
    from django.apps import apps
    from django.db.models.deletion import get_candidate_relations_to_delete

    meta = apps.get_model(label)._meta
    assert cleanup._relations_pointing_at(meta) == list(get_candidate_relations_to_delete(meta))


@pytest.mark.django_db
def test_non_terminal_records_cannot_carry_an_expiry(tenant, create_order) -> None:
    from django.db import IntegrityError, transaction

    record = reserve(tenant, create_order).record
    with pytest.raises(IntegrityError), transaction.atomic():
        IdempotencyRecord.objects.filter(pk=record.pk).update(
            expires_at=timezone.now() - timedelta(days=1)
        )
    assert cleanup_expired_records() == 0
    assert refresh(record).state == RecordState.EXECUTING


def _expired_records(tenant, tool, count: int) -> None:
    """``count`` succeeded records, past their TTL."""
    for i in range(count):
        record = reserve(tenant, tool, key=f"done-{i}").record
        complete_execution(record=record, fencing_token=1, outcome=Outcome.SUCCEEDED, actor="w")
    IdempotencyRecord.objects.update(expires_at=timezone.now() - timedelta(seconds=1))


@pytest.mark.django_db
def test_cleanup_batches_are_paced_and_reported(tenant, create_order, settings) -> None:
    import time

    settings.LEDGER_CLEANUP_PAUSE_MS = 60
    _expired_records(tenant, create_order, 5)
    batches: list[int] = []
    began = time.monotonic()
    deleted = cleanup_expired_records(
        batch_size=2, on_batch=lambda count, _seconds: batches.append(count)
    )
    assert deleted == 5 and batches == [2, 2, 1]
    assert time.monotonic() - began >= 2 * 0.06  # a pause between batches, none before the first


@pytest.mark.django_db
def test_a_cleanup_pause_is_at_least_twice_as_long_as_the_batch_before(
    tenant, create_order, settings
) -> None:
    """On a slow or busy database a batch takes longer than the configured pause; the pause
    then stretches to twice the batch's own length, so cleanup takes at most a third of the
    time."""
    import time

    settings.LEDGER_CLEANUP_PAUSE_MS = 1
    _expired_records(tenant, create_order, 3)
    took: list[float] = []
    began = time.monotonic()
    cleanup_expired_records(batch_size=1, on_batch=lambda _count, seconds: took.append(seconds))
    elapsed = time.monotonic() - began
    assert len(took) == 3  # one record each; a full batch is followed by a look for more
    pauses = sum(max(0.001, 2 * previous) for previous in took)
    assert elapsed >= sum(took) + pauses
