"""Every allowed and every forbidden state change of records and ledger entries."""

from __future__ import annotations

import itertools
import re
from datetime import timedelta
from functools import partial

import pytest
from django.utils import timezone

from ledger.domain import (
    DataClassification,
    Decision,
    EntryStatus,
    ObservationCode,
    RecordState,
    ReplayPolicy,
)
from ledger.errors import (
    ApprovalError,
    InvalidTransition,
    LeaseExpired,
    RecordSettled,
    ResultConflict,
    StaleFencingToken,
)
from ledger.models import AuditEvent, IdempotencyRecord, LedgerEntry
from ledger.records import (
    Outcome,
    complete_execution,
    heartbeat,
    reserve_key,
    resolve_unknown,
    start_execution,
    transitions,
)
from ledger.services.entries import transition_entry
from tests.factories import granted_entry, make_entry, refresh, reserve

pytestmark = pytest.mark.django_db

ALLOWED_RECORD = {
    (RecordState.RESERVED, RecordState.EXECUTING),
    (RecordState.EXECUTING, RecordState.SUCCEEDED),
    (RecordState.EXECUTING, RecordState.FAILED_FINAL),
    (RecordState.EXECUTING, RecordState.UNKNOWN),
    (RecordState.UNKNOWN, RecordState.SUCCEEDED),
    (RecordState.UNKNOWN, RecordState.FAILED_FINAL),
    (RecordState.UNKNOWN, RecordState.EXECUTING),
    (RecordState.FAILED_FINAL, RecordState.EXECUTING),
    # The current holder reports it ran after the ledger had settled it as not executed.
    (RecordState.FAILED_FINAL, RecordState.UNKNOWN),
}


def test_the_transition_table_is_exactly_the_designed_one() -> None:
    table = {(a, b) for a, targets in IdempotencyRecord.TRANSITIONS.items() for b in targets}
    assert table == ALLOWED_RECORD
    # Never back to reserved: not after a lapsed lease, not ever.
    assert all(b is not RecordState.RESERVED for _a, b in table)


def _record_in(state: RecordState, tenant, tool) -> IdempotencyRecord:
    record = reserve(tenant, tool, key=f"k-{state}").record
    if state is not RecordState.EXECUTING:
        changes = {"lease_owner": "", "lease_expires_at": None}
        if state in (RecordState.SUCCEEDED, RecordState.FAILED_FINAL):
            changes["expires_at"] = timezone.now() + timedelta(days=1)
        IdempotencyRecord.objects.filter(pk=record.pk).update(state=state, **changes)
    return refresh(record)


def test_every_allowed_change_is_declared_once_and_every_declared_one_is_allowed() -> None:
    declared = [(a, t.target) for t in transitions.DECLARED for a in t.sources]
    assert set(declared) == ALLOWED_RECORD
    assert len({t.action for t in transitions.DECLARED}) == len(transitions.DECLARED)


def test_the_metrics_count_every_transition_into_executing_and_into_unknown() -> None:
    from ledger.services import metrics

    into = {
        target: {t.action for t in transitions.DECLARED if t.target is target}
        for target in (RecordState.EXECUTING, RecordState.UNKNOWN)
    }
    assert set(metrics.EXECUTION_ACTIONS) == into[RecordState.EXECUTING]
    assert set(metrics.UNCERTAIN_ACTIONS) == into[RecordState.UNKNOWN]


@pytest.mark.parametrize(
    ("transition", "source"),
    list(itertools.product(transitions.DECLARED, RecordState)),
    ids=lambda v: v.name if isinstance(v, transitions.Transition) else str(v),
)
def test_record_transition(
    transition: transitions.Transition, source: RecordState, tenant, create_order
) -> None:
    record = _record_in(source, tenant, create_order)
    now = timezone.now()
    extra = {}
    if transition.target is RecordState.EXECUTING:
        extra = {"lease_owner": "w", "lease_expires_at": now + timedelta(minutes=1)}
    run = partial(transitions.run, transition, record, actor="t", source="system", now=now)
    if source in transition.sources:
        run(**extra)
        assert refresh(record).state == transition.target
        assert AuditEvent.objects.filter(
            action=transition.action, target_id=str(record.pk)
        ).exists()
    else:
        cannot = f"a record cannot go from {source} to {transition.target} ({transition.name})"
        with pytest.raises(InvalidTransition, match=f"^{re.escape(cannot)}$"):
            run(**extra)
        assert refresh(record).state == source


def test_a_new_key_executes_with_a_lease_and_token_one(tenant, create_order) -> None:
    reservation = reserve(tenant, create_order)
    assert reservation.created and reservation.decision is Decision.EXECUTE
    record = refresh(reservation.record)
    assert (record.state, record.fencing_token, record.executions) == ("executing", 1, 1)
    assert record.lease_owner == "worker-1" and record.lease_expires_at > timezone.now()
    assert AuditEvent.objects.filter(action="record.started", target_id=str(record.pk)).exists()


def test_a_key_needing_approval_is_only_reserved(tenant, create_order) -> None:
    reservation = reserve(tenant, create_order, requires_approval=True)
    assert reservation.decision is Decision.APPROVAL_REQUIRED
    assert refresh(reservation.record).state == RecordState.RESERVED
    entry = make_entry(tenant, create_order)
    entry.record = reservation.record
    entry.save(update_fields=["record"])
    with pytest.raises(ApprovalError):
        start_execution(record=reservation.record, entry=entry, lease_owner="w", actor="w")


def test_start_moves_reserved_to_executing_once_approved(tenant, create_order) -> None:
    record = reserve(tenant, create_order, requires_approval=True).record
    entry = granted_entry(record, create_order)
    started = start_execution(record=record, entry=entry, lease_owner="w2", actor="w2")
    assert (started.state, started.fencing_token, started.executions) == ("executing", 1, 1)


def test_duplicate_of_succeeded_returns_the_original_result(tenant, create_order) -> None:
    first = reserve(tenant, create_order)
    complete_execution(
        record=first.record,
        fencing_token=1,
        outcome=Outcome.SUCCEEDED,
        actor="w",
        result={"order_id": "o-1"},
    )
    again = reserve(tenant, create_order, owner="worker-2")
    assert again.decision is Decision.RECORDED_RESULT
    assert again.record.result == {"order_id": "o-1"}
    assert refresh(again.record).duplicate_hits == 1 and refresh(again.record).executions == 1


@pytest.mark.parametrize("taken", [False, True])
def test_a_duplicate_is_answered_the_same_whether_or_not_the_key_was_seen_taken(
    tenant, create_order, taken: bool
) -> None:
    """``taken`` (the one-statement way found the key taken) only changes the order of the
    look-ups: the duplicate is counted once and waits for the executing call."""
    first = reserve(tenant, create_order)
    again = reserve(tenant, create_order, owner="worker-2", taken=taken)
    assert again.decision is Decision.WAIT and not again.created
    assert again.record.pk == first.record.pk
    stored = refresh(first.record)
    assert (stored.duplicate_hits, stored.executions, stored.fencing_token) == (1, 1, 1)


def test_a_key_seen_taken_but_gone_since_is_taken_anew(tenant, create_order) -> None:
    """Between the one-statement way finding the key taken and the general way locking it,
    the record may have expired and been cleaned up: the key is then simply new."""
    reservation = reserve(tenant, create_order, taken=True)
    assert reservation.created and reservation.decision is Decision.EXECUTE
    assert IdempotencyRecord.objects.filter(tenant=tenant, key=reservation.record.key).count() == 1
    assert refresh(reservation.record).state == RecordState.EXECUTING


def test_duplicate_of_failed_final_returns_the_original_error(tenant, create_order) -> None:
    first = reserve(tenant, create_order)
    complete_execution(
        record=first.record,
        fencing_token=1,
        outcome=Outcome.FAILED,
        actor="w",
        error={"code": "PERMISSION_DENIED", "message": "no"},
    )
    again = reserve(tenant, create_order)
    assert again.decision is Decision.RECORDED_RESULT
    assert (
        again.code is ObservationCode.FAILED and again.record.error["code"] == "PERMISSION_DENIED"
    )


def test_same_key_different_fingerprint_is_a_conflict(tenant, create_order) -> None:
    reserve(tenant, create_order, params={"cart": "cart-1", "amount": 10})
    conflict = reserve(tenant, create_order, params={"cart": "cart-1", "amount": 99})
    assert conflict.decision is Decision.CONFLICT
    assert conflict.code is ObservationCode.IDEMPOTENCY_KEY_CONFLICT
    record = refresh(conflict.record)
    assert record.executions == 1 and record.duplicate_hits == 0
    assert AuditEvent.objects.filter(action="record.key_conflict", outcome="denied").count() == 1


def test_unknown_idempotent_call_is_replayed_with_a_new_token(tenant, read_file) -> None:
    first = reserve(tenant, read_file, key="k-read")
    complete_execution(record=first.record, fencing_token=1, outcome=Outcome.UNCERTAIN, actor="w")
    again = reserve(tenant, read_file, key="k-read", owner="w2")
    assert again.decision is Decision.EXECUTE
    record = refresh(again.record)
    assert (record.state, record.fencing_token, record.executions) == ("executing", 2, 2)


def test_unknown_non_idempotent_call_is_forbidden(tenant, create_order) -> None:
    first = reserve(tenant, create_order)
    complete_execution(record=first.record, fencing_token=1, outcome=Outcome.UNCERTAIN, actor="w")
    again = reserve(tenant, create_order, owner="w2")
    assert again.decision is Decision.FORBIDDEN
    assert again.code is ObservationCode.SIDE_EFFECT_UNCERTAIN
    assert refresh(again.record).executions == 1


def test_stale_fencing_token_is_refused_and_audited(tenant, read_file) -> None:
    first = reserve(tenant, read_file, key="k-read")
    complete_execution(record=first.record, fencing_token=1, outcome=Outcome.UNCERTAIN, actor="w")
    reserve(tenant, read_file, key="k-read", owner="w2")  # replay: token 2
    with pytest.raises(StaleFencingToken):
        complete_execution(
            record=first.record,
            fencing_token=1,
            outcome=Outcome.SUCCEEDED,
            actor="w",
            result={"late": True},
        )
    record = refresh(first.record)
    assert record.state == RecordState.EXECUTING and record.result is None
    assert AuditEvent.objects.filter(action="record.complete_refused", outcome="denied").exists()


def test_late_completion_with_the_current_token_resolves_unknown(tenant, create_order) -> None:
    first = reserve(tenant, create_order)
    complete_execution(record=first.record, fencing_token=1, outcome=Outcome.UNCERTAIN, actor="w")
    done = complete_execution(
        record=first.record,
        fencing_token=1,
        outcome=Outcome.SUCCEEDED,
        actor="w",
        result={"order_id": "o-1"},
    )
    assert done.state == RecordState.SUCCEEDED


def test_a_late_report_on_a_settled_record_is_refused_and_changes_nothing(
    tenant, create_order
) -> None:
    first = reserve(tenant, create_order)
    complete_execution(record=first.record, fencing_token=1, outcome=Outcome.SUCCEEDED, actor="w")
    with pytest.raises(RecordSettled):
        complete_execution(
            record=first.record,
            fencing_token=1,
            outcome=Outcome.FAILED,
            actor="w",
            error={"code": "X"},
        )
    assert refresh(first.record).state == RecordState.SUCCEEDED
    assert AuditEvent.objects.filter(action="record.complete_refused").count() == 1


def test_a_second_report_with_another_result_is_a_conflict_and_the_first_stands(
    tenant, create_order
) -> None:
    first = reserve(tenant, create_order)
    report = {"record": first.record, "fencing_token": 1, "actor": "w"}
    complete_execution(**report, outcome=Outcome.SUCCEEDED, result={"order": "o-1"})
    complete_execution(**report, outcome=Outcome.SUCCEEDED, result={"order": "o-1"})  # a retry
    with pytest.raises(ResultConflict):
        complete_execution(**report, outcome=Outcome.SUCCEEDED, result={"order": "o-2"})
    assert refresh(first.record).result == {"order": "o-1"}


@pytest.mark.parametrize("reported", [Outcome.SUCCEEDED, Outcome.UNCERTAIN])
def test_a_report_that_the_tool_ran_after_it_was_settled_as_not_run_goes_to_a_human(
    tenant, create_order, reported: Outcome
) -> None:
    """A look-up found no action and settled the record as safe to retry; then the holder of
    the current token says the tool ran (or may have). Neither fact wins: the record is
    unknown, no longer retryable, and escalated with both facts."""
    first = reserve(tenant, create_order)
    complete_execution(record=first.record, fencing_token=1, outcome=Outcome.UNCERTAIN, actor="w")
    resolve_unknown(
        record=first.record,
        outcome=Outcome.FAILED,
        actor="worker:w",
        error={"code": "NOT_EXECUTED", "message": "not found downstream"},
        detail="not found",
    )
    assert refresh(first.record).error_retryable is True
    complete_execution(
        record=first.record, fencing_token=1, outcome=reported, actor="w", result={"id": 1}
    )
    record = refresh(first.record)
    assert record.state == RecordState.UNKNOWN and record.error_retryable is False
    assert record.escalated_at is not None and "ran after all" in record.escalation_reason
    assert AuditEvent.objects.filter(action="record.report_contradicts_settlement").count() == 1


def test_result_is_redacted_before_it_is_stored(tenant, create_order) -> None:
    first = reserve(tenant, create_order)
    done = complete_execution(
        record=first.record,
        fencing_token=1,
        outcome=Outcome.SUCCEEDED,
        actor="w",
        result={"email": "bob@example.com", "token": "t"},
    )
    stored = refresh(done).result
    assert stored["token"] == "[REDACTED]" and "bob@example.com" not in stored["email"]


def test_heartbeat_extends_the_lease_of_the_holder_only(tenant, create_order) -> None:
    record = reserve(tenant, create_order).record
    before = refresh(record).lease_expires_at
    until = heartbeat(record=record, fencing_token=1, lease_seconds=600)
    assert until > before and refresh(record).lease_expires_at == until
    with pytest.raises(StaleFencingToken):
        heartbeat(record=record, fencing_token=7)


def test_heartbeat_after_the_lease_lapsed_is_refused(tenant, create_order) -> None:
    record = reserve(tenant, create_order).record
    IdempotencyRecord.objects.filter(pk=record.pk).update(
        lease_expires_at=timezone.now() - timedelta(seconds=1)
    )
    with pytest.raises(LeaseExpired):
        heartbeat(record=record, fencing_token=1)


def test_duplicate_of_an_executing_record_past_its_lease_sees_unknown(tenant, create_order) -> None:
    record = reserve(tenant, create_order).record
    IdempotencyRecord.objects.filter(pk=record.pk).update(
        lease_expires_at=timezone.now() - timedelta(seconds=1)
    )
    again = reserve(tenant, create_order, owner="w2")
    assert again.code is ObservationCode.SIDE_EFFECT_UNCERTAIN
    assert refresh(record).state == RecordState.UNKNOWN


def test_keys_are_per_tenant(tenant, other_tenant, create_order) -> None:
    from tests.factories import make_tool

    reserve(tenant, create_order)
    theirs = reserve(other_tenant, make_tool(other_tenant, "create_order"))
    assert theirs.created and theirs.decision is Decision.EXECUTE


# --- Ledger entries ------------------------------------------------------------------------

ALLOWED_ENTRY = {
    (EntryStatus.PLANNED, EntryStatus.APPROVED),
    (EntryStatus.PLANNED, EntryStatus.STARTED),
    (EntryStatus.PLANNED, EntryStatus.FAILED),
    (EntryStatus.APPROVED, EntryStatus.STARTED),
    (EntryStatus.APPROVED, EntryStatus.FAILED),
    (EntryStatus.STARTED, EntryStatus.SUCCEEDED),
    (EntryStatus.STARTED, EntryStatus.FAILED),
    (EntryStatus.STARTED, EntryStatus.UNCERTAIN),
    (EntryStatus.UNCERTAIN, EntryStatus.SUCCEEDED),
    (EntryStatus.UNCERTAIN, EntryStatus.FAILED),
    # Settled as not executed, then its executor reported that it ran.
    (EntryStatus.FAILED, EntryStatus.UNCERTAIN),
}


@pytest.mark.parametrize(
    ("source", "target"), list(itertools.product(EntryStatus, EntryStatus)), ids=str
)
def test_entry_transition(source: EntryStatus, target: EntryStatus, tenant, create_order) -> None:
    from tests.factories import make_entry

    entry = make_entry(tenant, create_order, status=source)
    if (source, target) in ALLOWED_ENTRY:
        transition_entry(entry, target)
        assert LedgerEntry.objects.get(pk=entry.pk).status == target
    else:
        with pytest.raises(InvalidTransition):
            transition_entry(entry, target)
        assert LedgerEntry.objects.get(pk=entry.pk).status == source


def test_entry_transition_loses_to_a_concurrent_change(tenant, create_order) -> None:
    from tests.factories import make_entry

    entry = make_entry(tenant, create_order, status=EntryStatus.STARTED)
    LedgerEntry.objects.filter(pk=entry.pk).update(status=EntryStatus.SUCCEEDED)
    with pytest.raises(InvalidTransition):
        transition_entry(entry, EntryStatus.UNCERTAIN)


def test_reserve_key_takes_its_arguments_by_name_only(tenant, create_order) -> None:
    named = {
        "tool": create_order,
        "key": "k-positional",
        "fingerprint": "0" * 64,
        "replay_policy": ReplayPolicy.NEVER,
        "data_classification": DataClassification.INTERNAL,
        "lease_owner": "w",
        "actor": "w",
    }
    with pytest.raises(TypeError, match="positional"):
        reserve_key(tenant, **named)  # type: ignore[misc]
    assert not IdempotencyRecord.objects.filter(key="k-positional").exists()
    reserve_key(tenant=tenant, **named)  # the same arguments, by name, reserve the key
    assert IdempotencyRecord.objects.filter(key="k-positional").exists()


def test_a_contradicting_report_voids_open_approvals_and_its_retry_changes_nothing(
    tenant, create_order
) -> None:
    """The executor's report arrives after a look-up settled the action as not run and an
    approval to run it again was granted: the approval is voided (the action must not start a
    second time), and the same report sent again is answered as before, changing nothing."""
    from ledger.models import ApprovalRequest, LedgerEntry
    from ledger.services import approvals
    from tests.factories import make_entry

    first = reserve(tenant, create_order)
    complete_execution(record=first.record, fencing_token=1, outcome=Outcome.UNCERTAIN, actor="w")
    resolve_unknown(
        record=first.record,
        outcome=Outcome.FAILED,
        actor="worker:w",
        error={"code": "NOT_EXECUTED", "message": "not found downstream"},
        detail="not found",
    )
    entry = make_entry(tenant, create_order)
    LedgerEntry.objects.filter(pk=entry.pk).update(record=first.record)
    approval = approvals.request_approval(
        record=refresh(first.record), entry=entry, requested_by="token:x"
    )
    ApprovalRequest.objects.filter(pk=approval.pk).update(state="approved")
    report = {"record": first.record, "fencing_token": 1, "actor": "w", "result": {"id": 1}}
    complete_execution(**report, outcome=Outcome.SUCCEEDED)
    assert ApprovalRequest.objects.get(pk=approval.pk).state == "invalidated"
    escalated = refresh(first.record)
    complete_execution(**report, outcome=Outcome.SUCCEEDED)  # its response was lost
    again = refresh(first.record)
    assert again.state == RecordState.UNKNOWN
    assert (again.escalated_at, again.updated_at) == (escalated.escalated_at, escalated.updated_at)
