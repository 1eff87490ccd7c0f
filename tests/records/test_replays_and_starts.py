"""What a replay and a start write besides the new fencing token: the answer the caller gets,
the lease it asked for, the audit event, and a record cleared of the failure and the approval
that came before. And the starts that are refused, with the reason given."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from ledger.errors import ApprovalError, InvalidTransition
from ledger.models import ApprovalRequest, AuditEvent, IdempotencyRecord, Tenant, Tool
from ledger.records import Outcome, complete_execution, start_execution
from tests.factories import granted_entry, make_entry, refresh, reserve

pytestmark = pytest.mark.django_db

# Longer than the default lease (LEDGER_LEASE_SECONDS), so a lease of the default is told apart.
ASKED = 3600


def _failed(tenant: Tenant, tool: Tool, code: str, *, retryable: bool) -> IdempotencyRecord:
    record = reserve(tenant, tool, key="k-read").record
    complete_execution(
        record=record,
        fencing_token=1,
        outcome=Outcome.FAILED,
        actor="w",
        error={"code": code, "message": "no"},
        retryable=retryable,
    )
    return refresh(record)


def _lease_left(record: IdempotencyRecord) -> timedelta:
    lease = refresh(record).lease_expires_at
    assert lease is not None
    return lease - timezone.now()


def test_a_replay_is_answered_execute_on_the_existing_record(tenant, read_file) -> None:
    first = reserve(tenant, read_file, key="k-read").record
    complete_execution(record=first, fencing_token=1, outcome=Outcome.UNCERTAIN, actor="w")
    again = reserve(tenant, read_file, key="k-read", owner="w2", lease_seconds=ASKED)
    assert (again.created, again.decision.value, again.code) == (False, "execute", None)
    assert again.next_action == "execute"
    assert timedelta(seconds=ASKED - 60) < _lease_left(first) <= timedelta(seconds=ASKED)
    event = AuditEvent.objects.filter(target_id=str(first.pk)).latest("pk")
    assert (event.action, event.actor) == ("record.replayed", "w2")


def test_a_retry_clears_the_failure_it_retries(tenant, read_file) -> None:
    record = _failed(tenant, read_file, "UPSTREAM_5XX", retryable=True)
    assert record.completed_at is not None and record.error_retryable
    again = reserve(tenant, read_file, key="k-read", owner="w2")
    assert again.decision.value == "execute"
    retried = refresh(record)
    assert (retried.state, retried.error, retried.error_retryable) == ("executing", None, False)
    assert retried.completed_at is None


def test_an_approved_start_is_no_longer_waiting_for_an_approval(tenant, create_order) -> None:
    record = reserve(tenant, create_order, requires_approval=True).record
    started = start_execution(
        record=record,
        entry=granted_entry(record, create_order),
        lease_owner="w2",
        actor="w2",
        lease_seconds=ASKED,
    )
    assert started.requires_approval is False
    assert refresh(record).requires_approval is False
    assert timedelta(seconds=ASKED - 60) < _lease_left(record) <= timedelta(seconds=ASKED)
    event = AuditEvent.objects.filter(target_id=str(record.pk)).latest("pk")
    assert (event.action, event.actor) == ("record.started", "w2")


def test_a_start_uses_up_the_approval_it_is_made_with(tenant, create_order) -> None:
    record = reserve(tenant, create_order, requires_approval=True).record
    entry = granted_entry(record, create_order)
    start_execution(record=record, entry=entry, lease_owner="w2", actor="w2")
    assert ApprovalRequest.objects.get(record=record).state == ApprovalRequest.State.CONSUMED


def test_a_start_without_a_granted_approval_is_refused(tenant, create_order) -> None:
    """Whoever calls: the approval is checked where the record starts, not by the caller."""
    record = reserve(tenant, create_order, requires_approval=True).record
    entry = make_entry(tenant, create_order)
    entry.record = record
    entry.save(update_fields=["record"])
    with pytest.raises(ApprovalError, match=r"^there is no granted approval for this action$"):
        start_execution(record=record, entry=entry, lease_owner="w2", actor="w2")
    assert refresh(record).state == "reserved"


@pytest.mark.parametrize(
    ("code", "retryable"),
    [("UPSTREAM_5XX", False), ("PERMISSION_DENIED", True)],
    ids=["not_retryable", "final_code_reported_retryable"],
)
def test_an_approved_start_of_a_failure_for_good_is_refused(
    tenant, read_file, code: str, retryable: bool
) -> None:
    record = _failed(tenant, read_file, code, retryable=retryable)
    with pytest.raises(
        InvalidTransition, match=r"^the action failed for good; it is never started again$"
    ):
        start_execution(
            record=record, entry=make_entry(tenant, read_file), lease_owner="w2", actor="w2"
        )
    assert (refresh(record).state, refresh(record).executions) == ("failed_final", 1)


def test_an_approved_start_of_a_running_record_is_refused_and_keeps_the_approval(
    tenant, create_order
) -> None:
    record = reserve(tenant, create_order, requires_approval=True).record
    entry = granted_entry(record, create_order)
    # Started meanwhile by another way than this approval.
    IdempotencyRecord.objects.filter(pk=record.pk).update(
        state="executing", lease_owner="w1", lease_expires_at=timezone.now() + timedelta(minutes=1)
    )
    with pytest.raises(
        InvalidTransition, match=r"^the action is executing; it does not wait to be started$"
    ):
        start_execution(record=record, entry=entry, lease_owner="w2", actor="w2")
    assert refresh(record).lease_owner == "w1"
    assert ApprovalRequest.objects.get(entry=entry).state == ApprovalRequest.State.APPROVED


def test_an_approved_start_of_a_retryable_failure_starts_it(tenant, read_file) -> None:
    record = _failed(tenant, read_file, "UPSTREAM_5XX", retryable=True)
    entry = granted_entry(record, read_file)
    started = start_execution(record=record, entry=entry, lease_owner="w2", actor="w2")
    assert (started.state, started.fencing_token, started.executions) == ("executing", 2, 2)
