"""Reports that reach a record someone else already settled: the same report sent again, a
report that differs from the recorded result, and a report that contradicts a settled failure.
What each one writes to the reporting call's ledger entry, the audit trail and the record, and
what it leaves alone (docs/testing.md names the details ``make mutate`` showed untested)."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import transaction

from ledger.domain import DataClassification, EscalationKind
from ledger.errors import ResultConflict
from ledger.keys import fingerprint
from ledger.models import AuditEvent, IdempotencyRecord, LedgerEntry, Tenant, Tool
from ledger.records import (
    CONTRADICTION_ESCALATION,
    REFUSED_STALE,
    CompletionRefused,
    Outcome,
    complete_execution,
    complete_locked,
    lock_record,
    resolve_unknown,
)
from tests.factories import make_entry, refresh, reserve

pytestmark = pytest.mark.django_db


def _settled_as_not_run(
    tenant: Tenant,
    tool: Tool,
    error: dict[str, Any] | None,
    data_classification: DataClassification = DataClassification.INTERNAL,
) -> IdempotencyRecord:
    """A record whose executor went uncertain, then a look-up found nothing downstream."""
    record = reserve(tenant, tool, data_classification=data_classification).record
    complete_execution(record=record, fencing_token=1, outcome=Outcome.UNCERTAIN, actor="w")
    resolve_unknown(record=record, outcome=Outcome.FAILED, actor="look-up", error=error, detail="")
    return refresh(record)


def _started_entry(tenant: Tenant, tool: Tool, record: IdempotencyRecord) -> LedgerEntry:
    """The reporting call's entry, still waiting for its executor's report."""
    entry = make_entry(tenant, tool, status="started")
    LedgerEntry.objects.filter(pk=entry.pk).update(record=record, fencing_token=1)
    return LedgerEntry.objects.get(pk=entry.pk)


def test_the_same_failure_reported_again_settles_the_reporting_entry_with_its_evidence(
    tenant, create_order
) -> None:
    record = _settled_as_not_run(
        tenant, create_order, {"code": "NOT_EXECUTED"}, DataClassification.RESTRICTED
    )
    entry = _started_entry(tenant, create_order, record)
    complete_execution(
        record=record,
        fencing_token=1,
        outcome=Outcome.FAILED,
        actor="w",
        error={"code": "NOT_EXECUTED"},
        entry=entry,
        evidence={"token": "secret-value"},
    )
    settled = LedgerEntry.objects.get(pk=entry.pk)
    assert settled.status == "failed" and settled.finished_at is not None
    kept = {"redacted": "restricted", "sha256": fingerprint({"token": "secret-value"})}
    assert settled.side_effects == [{"evidence": kept}]
    assert refresh(record).state == "failed_final"


def test_a_contradicting_report_makes_its_entry_uncertain_and_asks_a_human_not_a_look_up(
    tenant, create_order, announced
) -> None:
    record = _settled_as_not_run(tenant, create_order, {"code": "NOT_EXECUTED"})
    entry = _started_entry(tenant, create_order, record)
    announced.clear()
    complete_execution(
        record=record, fencing_token=1, outcome=Outcome.SUCCEEDED, actor="w", entry=entry
    )
    assert LedgerEntry.objects.get(pk=entry.pk).status == "uncertain"
    assert refresh(record).state == "unknown"
    assert announced == []
    event = AuditEvent.objects.get(action="record.report_contradicts_settlement")
    reason = CONTRADICTION_ESCALATION.format(outcome="succeeded")
    assert event.detail == f"was failed_final (NOT_EXECUTED); {reason}"


def test_a_contradicting_report_leaves_an_entry_already_uncertain_as_it_is(
    tenant, create_order
) -> None:
    """The record's contradiction is recorded whatever the entry's status; the entry moves
    only where its own table lets it (an uncertain entry cannot become uncertain again)."""
    record = _settled_as_not_run(tenant, create_order, {"code": "NOT_EXECUTED"})
    entry = make_entry(tenant, create_order, status="uncertain")
    complete_execution(
        record=record, fencing_token=1, outcome=Outcome.SUCCEEDED, actor="w", entry=entry
    )
    after = refresh(record)
    assert (after.state, after.escalation_kind) == (
        "unknown",
        EscalationKind.CONTRADICTED_SETTLEMENT,
    )
    assert LedgerEntry.objects.get(pk=entry.pk).status == "uncertain"


@pytest.mark.parametrize(
    ("first", "then"),
    [(Outcome.UNCERTAIN, Outcome.SUCCEEDED), (Outcome.SUCCEEDED, Outcome.FAILED)],
)
def test_a_contradicted_record_is_escalated_by_kind_and_later_reports_leave_it_to_the_human(
    tenant, create_order, first: Outcome, then: Outcome
) -> None:
    record = _settled_as_not_run(tenant, create_order, {"code": "NOT_EXECUTED"})
    complete_execution(record=record, fencing_token=1, outcome=first, actor="w")
    escalated = refresh(record)
    assert escalated.escalation_kind == EscalationKind.CONTRADICTED_SETTLEMENT
    assert escalated.escalated_at is not None
    complete_execution(record=record, fencing_token=1, outcome=then, actor="w", result={"id": 1})
    after = refresh(record)
    assert (after.state, after.escalated_at, after.escalation_reason) == (
        "unknown",
        escalated.escalated_at,
        escalated.escalation_reason,
    )


def test_a_contradicted_failure_without_an_error_code_is_named_failed(tenant, create_order) -> None:
    record = _settled_as_not_run(tenant, create_order, None)
    complete_execution(record=record, fencing_token=1, outcome=Outcome.UNCERTAIN, actor="w")
    event = AuditEvent.objects.get(action="record.report_contradicts_settlement")
    reason = CONTRADICTION_ESCALATION.format(outcome="uncertain")
    assert event.detail == f"was failed_final (FAILED); {reason}"


def test_a_differing_result_is_refused_as_a_conflict_however_often_it_is_sent(
    tenant, create_order
) -> None:
    """The refusal is audited too; it does not change who recorded the result."""
    record = reserve(tenant, create_order).record
    complete_execution(
        record=record, fencing_token=1, outcome=Outcome.SUCCEEDED, actor="w", result={"id": 1}
    )
    conflict = (
        r"^this call's result was already recorded, and the report differs from it; the "
        r"recorded result stands$"
    )
    for _ in range(2):
        with pytest.raises(ResultConflict, match=conflict):
            complete_execution(
                record=record,
                fencing_token=1,
                outcome=Outcome.SUCCEEDED,
                actor="w",
                result={"id": 2},
            )
    assert refresh(record).result == {"id": 1}


def test_another_records_settlement_does_not_change_who_recorded_this_result(
    tenant, create_order
) -> None:
    reported = reserve(tenant, create_order, key="k-reported").record
    complete_execution(
        record=reported, fencing_token=1, outcome=Outcome.SUCCEEDED, actor="w", result={"id": 1}
    )
    looked_up = reserve(tenant, create_order, key="k-looked-up").record
    complete_execution(record=looked_up, fencing_token=1, outcome=Outcome.UNCERTAIN, actor="w")
    resolve_unknown(
        record=looked_up, outcome=Outcome.SUCCEEDED, actor="look-up", result={}, detail="found"
    )
    with pytest.raises(ResultConflict):
        complete_execution(
            record=reported, fencing_token=1, outcome=Outcome.SUCCEEDED, actor="w", result={"id": 2}
        )


def test_a_result_the_database_stores_differently_is_the_same_report(tenant, create_order) -> None:
    """1e23 is stored as the number 100000000000000000000000: Python's equality says the
    report differs from what was read back, the stored JSON says it does not."""
    record = reserve(tenant, create_order).record
    report = {"record": record, "fencing_token": 1, "actor": "w", "result": {"n": 1e23}}
    complete_execution(**report, outcome=Outcome.SUCCEEDED)
    assert refresh(record).result != {"n": 1e23}
    complete_execution(**report, outcome=Outcome.SUCCEEDED)
    assert not AuditEvent.objects.filter(action="record.complete_refused").exists()


def test_a_report_refused_under_the_callers_lock_says_why(tenant, create_order) -> None:
    """``complete_locked`` raises before writing; the caller audits the refusal."""
    record = reserve(tenant, create_order).record
    with transaction.atomic():
        locked, now = lock_record(record.pk)
        with pytest.raises(CompletionRefused, match=r"^stale$") as refused:
            complete_locked(locked, now=now, fencing_token=2, outcome=Outcome.FAILED, actor="w")
    assert refused.value.reason == REFUSED_STALE
    assert refresh(record).state == "executing"


def test_a_contradicting_report_counts_as_a_call_that_became_uncertain(
    tenant, create_order
) -> None:
    """The metric counts every transition into ``unknown``, the contradiction's too."""
    from ledger.services import metrics

    record = _settled_as_not_run(tenant, create_order, {"code": "NOT_EXECUTED"})
    metrics.roll_up()
    before = metrics.summarize(tenant).became_uncertain
    entry = _started_entry(tenant, create_order, record)
    complete_execution(
        record=record, fencing_token=1, outcome=Outcome.SUCCEEDED, actor="w", entry=entry
    )
    metrics.roll_up()
    assert metrics.summarize(tenant).became_uncertain == before + 1
