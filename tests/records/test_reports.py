"""What the holder's report writes: the result kept as its data classification allows and
only for a success, a failure retryable only when reported so, the source of the report in
the audit trail, and the refusals of reports that reach a record settled otherwise."""

from __future__ import annotations

import pytest
from django.db import transaction
from django.utils import timezone

from ledger.domain import DataClassification
from ledger.errors import InvalidTransition, RecordSettled
from ledger.keys import fingerprint
from ledger.models import ApprovalRequest, AuditEvent, IdempotencyRecord, LedgerEntry
from ledger.records import (
    Outcome,
    complete_execution,
    complete_locked,
    lock_record,
    resolve_locked,
    resolve_unknown,
)
from ledger.redaction import MAX_TEXT
from ledger.services import approvals
from tests.factories import make_entry, refresh, reserve

pytestmark = pytest.mark.django_db


def test_a_result_is_kept_as_its_data_classification_allows(tenant, create_order) -> None:
    record = reserve(tenant, create_order, data_classification=DataClassification.RESTRICTED).record
    complete_execution(
        record=record,
        fencing_token=1,
        outcome=Outcome.SUCCEEDED,
        actor="w",
        result={"order": "o-1"},
    )
    kept = refresh(record).result
    assert kept["redacted"] == "restricted" and "o-1" not in str(kept)


def test_a_result_keeps_more_text_than_other_stored_values(tenant, create_order) -> None:
    """Results are handed back to duplicates, so they keep more than the usual limit."""
    record = reserve(tenant, create_order).record
    text = "x" * (MAX_TEXT + 100)
    complete_execution(
        record=record, fencing_token=1, outcome=Outcome.SUCCEEDED, actor="w", result={"t": text}
    )
    assert refresh(record).result == {"t": text}


def test_a_failure_keeps_no_result_and_is_not_retryable_unless_reported_so(
    tenant, read_file
) -> None:
    record = reserve(tenant, read_file, key="k-read").record
    complete_execution(
        record=record,
        fencing_token=1,
        outcome=Outcome.FAILED,
        actor="w",
        result={"partial": 1},
        error={"code": "UPSTREAM_5XX"},
    )
    failed = refresh(record)
    assert (failed.result, failed.error_retryable) == (None, False)
    again = reserve(tenant, read_file, key="k-read", owner="w2")
    assert again.decision.value == "recorded_result"


def test_a_report_is_audited_with_its_source(tenant, create_order) -> None:
    record = reserve(tenant, create_order).record
    complete_execution(
        record=record, fencing_token=1, outcome=Outcome.SUCCEEDED, actor="w", source="worker"
    )
    event = AuditEvent.objects.get(action="record.succeeded", target_id=str(record.pk))
    assert event.source == "worker"


def test_a_report_repeated_after_a_human_settled_the_contradiction_is_refused(
    tenant, create_order
) -> None:
    """The escalation's reason stays on the settled record; the report does not pass for the
    repeat of the one that contradicted."""
    record = reserve(tenant, create_order).record
    complete_execution(record=record, fencing_token=1, outcome=Outcome.UNCERTAIN, actor="w")
    resolve_unknown(record=record, outcome=Outcome.FAILED, actor="look-up", detail="not found")
    complete_execution(record=record, fencing_token=1, outcome=Outcome.UNCERTAIN, actor="w")
    assert refresh(record).escalated_at is not None
    resolve_unknown(record=record, outcome=Outcome.SUCCEEDED, actor="human", detail="it ran")
    with pytest.raises(RecordSettled, match=r"the record is succeeded"):
        complete_execution(record=record, fencing_token=1, outcome=Outcome.UNCERTAIN, actor="w")


def test_locking_a_record_that_is_gone_names_it() -> None:
    with pytest.raises(IdempotencyRecord.DoesNotExist, match=r"^no record 987654$"):
        lock_record(987654)


def test_a_failure_reported_under_the_callers_lock_is_not_retryable_unless_said(
    tenant, read_file
) -> None:
    record = reserve(tenant, read_file, key="k-read").record
    with transaction.atomic():
        locked, now = lock_record(record.pk)
        complete_locked(
            locked, now=now, fencing_token=1, outcome=Outcome.FAILED, actor="w", error={"code": "X"}
        )
    assert refresh(record).error_retryable is False


def test_a_report_finishes_its_entry_with_the_evidence_as_classified(tenant, create_order) -> None:
    record = reserve(tenant, create_order, data_classification=DataClassification.RESTRICTED).record
    entry = make_entry(tenant, create_order, status="started")
    LedgerEntry.objects.filter(pk=entry.pk).update(record=record, fencing_token=1)
    evidence = {"receipt": "r-1"}
    complete_execution(
        record=record,
        fencing_token=1,
        outcome=Outcome.SUCCEEDED,
        actor="w",
        result={"order": "o-1"},
        entry=LedgerEntry.objects.get(pk=entry.pk),
        evidence=evidence,
    )
    finished = LedgerEntry.objects.get(pk=entry.pk)
    assert finished.status == "succeeded" and finished.finished_at is not None
    kept = {"redacted": "restricted", "sha256": fingerprint(evidence)}
    assert finished.side_effects == [{"evidence": kept}]
    assert refresh(record).error is None


def test_a_restricted_error_keeps_only_its_hash_and_code(tenant, create_order) -> None:
    record = reserve(tenant, create_order, data_classification=DataClassification.RESTRICTED).record
    error = {"code": "UPSTREAM_5XX", "message": "card 4111 declined"}
    complete_execution(
        record=record,
        fencing_token=1,
        outcome=Outcome.FAILED,
        actor="w",
        error=error,
    )
    kept = {"redacted": "restricted", "sha256": fingerprint(error), "code": "UPSTREAM_5XX"}
    assert refresh(record).error == kept


def test_settling_a_record_invalidates_its_open_approval_and_says_so(tenant, create_order) -> None:
    record = reserve(tenant, create_order).record
    entry = make_entry(tenant, create_order)
    LedgerEntry.objects.filter(pk=entry.pk).update(record=record)
    approval = approvals.request_approval(record=refresh(record), entry=entry, requested_by="t:x")
    complete_execution(record=record, fencing_token=1, outcome=Outcome.SUCCEEDED, actor="w")
    assert ApprovalRequest.objects.get(pk=approval.pk).state == "invalidated"
    event = AuditEvent.objects.get(action="record.succeeded", target_id=str(record.pk))
    assert event.detail == "(1 open approval(s) invalidated)"


def test_a_transition_from_a_state_the_record_has_left_changes_nothing(
    tenant, create_order
) -> None:
    """The state guard of every transition: a caller acting on a record as it read it
    earlier is refused once the record has moved on, whatever it holds in memory."""
    record = reserve(tenant, create_order).record
    complete_execution(record=record, fencing_token=1, outcome=Outcome.UNCERTAIN, actor="w")
    stale = refresh(record)
    resolve_unknown(record=record, outcome=Outcome.FAILED, actor="look-up", detail="not found")
    with pytest.raises(
        InvalidTransition, match=rf"^record {record.pk} changed state concurrently$"
    ):
        resolve_locked(
            stale,
            now=timezone.now(),
            outcome=Outcome.SUCCEEDED,
            actor="h",
            source="console",
            detail="found",
        )
    assert refresh(record).state == "failed_final"


def test_a_report_whose_entry_moved_on_is_refused_and_changes_nothing(tenant, create_order) -> None:
    record = reserve(tenant, create_order).record
    entry = make_entry(tenant, create_order, status="started")
    LedgerEntry.objects.filter(pk=entry.pk).update(record=record, fencing_token=1)
    stale = LedgerEntry.objects.get(pk=entry.pk)
    LedgerEntry.objects.filter(pk=entry.pk).update(status="uncertain")
    with pytest.raises(
        InvalidTransition, match=rf"^ledger entry {stale.call_id} changed status concurrently$"
    ):
        complete_execution(
            record=record, fencing_token=1, outcome=Outcome.SUCCEEDED, actor="w", entry=stale
        )
    assert refresh(record).state == "executing"
