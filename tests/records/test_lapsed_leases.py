"""A lease that lapsed, found by a duplicate under the record's lock or by the sweep: the
record becomes unknown as the system's doing, and the entry of the call that started it, which
never reported, becomes uncertain with it."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db.models.functions import Now

from ledger.models import AuditEvent, IdempotencyRecord, LedgerEntry, Tenant, Tool
from ledger.records import expire_leases
from tests.factories import make_entry, refresh, reserve

pytestmark = pytest.mark.django_db


def _lapsed_with_its_entry(tenant: Tenant, tool: Tool) -> tuple[IdempotencyRecord, LedgerEntry]:
    record = reserve(tenant, tool).record
    entry = make_entry(tenant, tool, status="started")
    LedgerEntry.objects.filter(pk=entry.pk).update(record=record, fencing_token=1)
    IdempotencyRecord.objects.filter(pk=record.pk).update(
        lease_expires_at=Now() - timedelta(seconds=1)
    )
    return record, entry


def _assert_lapsed_by_the_system(record: IdempotencyRecord, entry: LedgerEntry) -> None:
    assert refresh(record).state == "unknown"
    assert LedgerEntry.objects.get(pk=entry.pk).status == "uncertain"
    event = AuditEvent.objects.get(action="record.lease_expired", target_id=str(record.pk))
    assert event.actor == "system"


def test_a_duplicate_that_finds_the_lease_lapsed_makes_the_call_uncertain(
    tenant, create_order
) -> None:
    record, entry = _lapsed_with_its_entry(tenant, create_order)
    duplicate = reserve(tenant, create_order, owner="w2")
    assert duplicate.decision.value == "forbidden"
    _assert_lapsed_by_the_system(record, entry)


def test_the_sweep_makes_the_call_of_a_lapsed_lease_uncertain(tenant, create_order) -> None:
    record, entry = _lapsed_with_its_entry(tenant, create_order)
    assert expire_leases() == [record.pk]
    _assert_lapsed_by_the_system(record, entry)


def test_a_duplicate_that_finds_the_lease_lapsed_announces_the_record_for_a_look_up(
    tenant, create_order, announced
) -> None:
    record, _entry = _lapsed_with_its_entry(tenant, create_order)
    reserve(tenant, create_order, owner="w2")
    assert announced == [[record.pk]]
