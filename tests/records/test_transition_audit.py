"""What every record transition writes beside the new state: the audit event in the record's
tenant with the record's state, token, lease holder and execution counts before and after; the
count of executions known to have had no effect; a fresh start of reconciliation for each spell
of uncertainty; and the announcement that makes a look-up start without waiting for the sweep.
Each test stands behind a detail that ``make mutate`` showed no other test noticed
(docs/testing.md)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from ledger.models import AuditEvent, IdempotencyRecord
from ledger.records import Outcome, complete_execution
from tests.factories import make_tenant, make_tool, refresh, reserve

pytestmark = pytest.mark.django_db


def _last_event(record: IdempotencyRecord) -> AuditEvent:
    return AuditEvent.objects.filter(
        target_type="idempotencyrecord", target_id=str(record.pk)
    ).latest("id")


@pytest.mark.parametrize(
    ("outcome", "state", "failed"),
    [(Outcome.SUCCEEDED, "succeeded", 0), (Outcome.FAILED, "failed_final", 1)],
)
def test_a_completion_is_audited_in_the_records_tenant_with_what_it_changed(
    outcome: Outcome, state: str, failed: int
) -> None:
    make_tenant("other")  # a second tenant, so the event's tenant is not the only one there is
    tenant = make_tenant("acme-audit")
    tool = make_tool(tenant, "create_order")
    record = reserve(tenant, tool, owner="worker-7").record
    error = {"code": "DECLINED", "message": "card declined"} if failed else None
    complete_execution(
        record=record, fencing_token=1, outcome=outcome, actor="worker-7", error=error
    )
    event = _last_event(record)
    assert event.tenant_id == tenant.pk
    assert event.before == {
        "state": "executing",
        "fencing_token": 1,
        "lease_owner": "worker-7",
        "executions": 1,
        "failed_executions": 0,
    }
    assert event.after == {
        "state": state,
        "fencing_token": 1,
        "lease_owner": "",
        "executions": 1,
        "failed_executions": failed,
    }


def test_only_a_final_failure_counts_an_execution_known_to_have_had_no_effect(
    tenant, create_order
) -> None:
    """``failed_executions`` is what the duplicate-side-effect metric subtracts: an execution
    that ended in a final error did nothing; one that succeeded or became uncertain may have."""
    results = {}
    for n, outcome in enumerate((Outcome.SUCCEEDED, Outcome.UNCERTAIN, Outcome.FAILED)):
        record = reserve(tenant, create_order, key=f"k-failed-{n}").record
        error = {"code": "DECLINED", "message": "no"} if outcome is Outcome.FAILED else None
        complete_execution(record=record, fencing_token=1, outcome=outcome, actor="w", error=error)
        results[outcome] = refresh(record).failed_executions
    assert results == {Outcome.SUCCEEDED: 0, Outcome.UNCERTAIN: 0, Outcome.FAILED: 1}


def test_each_spell_of_uncertainty_starts_reconciliation_afresh(tenant, create_order) -> None:
    record = reserve(tenant, create_order).record
    # What an earlier spell of uncertainty left behind: a look-up planned far ahead, attempts,
    # the question it put to a human.
    IdempotencyRecord.objects.filter(pk=record.pk).update(
        next_reconcile_at=timezone.now() + timedelta(days=3),
        reconcile_attempts=4,
        escalated_at=timezone.now() - timedelta(days=1),
        escalation_reason="no look-up answered",
    )
    complete_execution(
        record=refresh(record), fencing_token=1, outcome=Outcome.UNCERTAIN, actor="w"
    )
    after = refresh(record)
    assert after.state == "unknown"
    assert after.next_reconcile_at is None  # due at once, not in three days
    assert after.reconcile_attempts == 0
    assert after.uncertain_since is not None
    assert (after.escalated_at, after.escalation_reason) == (None, "")  # no human asked yet


def test_a_record_that_becomes_unknown_is_announced_and_no_other(
    tenant, create_order, announced
) -> None:
    uncertain = reserve(tenant, create_order, key="k-uncertain").record
    settled = reserve(tenant, create_order, key="k-settled").record
    complete_execution(record=settled, fencing_token=1, outcome=Outcome.SUCCEEDED, actor="w")
    assert announced == []
    complete_execution(record=uncertain, fencing_token=1, outcome=Outcome.UNCERTAIN, actor="w")
    assert announced == [[uncertain.pk]]
