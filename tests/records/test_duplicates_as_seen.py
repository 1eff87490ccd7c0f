"""A duplicate answered from its record as read, without the record's lock or a transaction
(``records.answer_as_seen`` and ``count_duplicate_as_seen``): only ``wait`` and
``recorded_result``, and only while the record is still as it was read."""

from __future__ import annotations

from datetime import datetime, timedelta
from functools import partial

import pytest
from django.db import transaction
from django.db.models import BooleanField
from django.db.models.expressions import RawSQL
from django.db.models.functions import Now
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ledger.clock import db_now
from ledger.domain import DataClassification, Decision, ObservationCode, RecordState, ReplayPolicy
from ledger.keys import fingerprint
from ledger.models import IdempotencyRecord, LedgerEntry, Tool
from ledger.records import (
    Outcome,
    answer_as_seen,
    complete_execution,
    count_duplicate_as_seen,
    heartbeat,
    reserve_key,
    start_execution,
)
from ledger.records.lease import lapsed_sql
from ledger.sql.statements import quote
from tests.factories import granted_entry, make_run, refresh, reserve

pytestmark = pytest.mark.django_db


def _answer(seen: IdempotencyRecord, tool: Tool, *, params=None, lapsed: bool | None = None):
    if lapsed is None:  # as the reading statement judges it: by the database's clock
        lapsed = _lapsed_by_the_database(seen)
    return answer_as_seen(
        seen,
        fingerprint=fingerprint(params if params is not None else {"cart": "cart-1"}),
        replay_policy=ReplayPolicy(tool.replay_policy),
        lapsed=lapsed,
    )


def _duplicate_entry(
    seen: IdempotencyRecord, tool: Tool, decision: Decision | None = None
) -> LedgerEntry:
    """An unsaved entry of a duplicate of ``seen``, as the hot path builds it: with the answer
    ``seen`` gets, or ``decision``."""
    answer = _answer(seen, tool)
    decision = decision or (answer.decision if answer else None)
    assert decision is not None
    return LedgerEntry(
        tenant_id=seen.tenant_id,
        step_id="step-dup",
        run=make_run(seen.tenant),
        tool=tool,
        input_hash=seen.fingerprint,
        input={"cart": "cart-1"},
        status="planned" if decision is Decision.WAIT else "succeeded",
        idempotency=tool.idempotency,
        replay_policy=tool.replay_policy,
        classification_reason=tool.reason,
        classification_rule=tool.rule,
        idempotency_key=seen.key,
        record=seen,
        decision=decision,
        observation_code=answer.code.value if answer and answer.code else "",
        input_source="model",
        data_classification="internal",
        reused_record=True,
    )


def _fail(record: IdempotencyRecord, token: int) -> None:
    complete_execution(
        record=record,
        fencing_token=token,
        outcome=Outcome.FAILED,
        actor="w",
        error={"code": "UPSTREAM_5XX", "message": "try later"},
        retryable=True,
    )


def test_an_executing_record_within_its_lease_is_answered_wait(tenant, create_order) -> None:
    seen = refresh(reserve(tenant, create_order).record)
    answer = _answer(seen, create_order)
    assert answer is not None
    assert (answer.decision, answer.code, answer.created) == (
        Decision.WAIT,
        ObservationCode.IN_PROGRESS,
        False,
    )


def test_a_succeeded_record_is_answered_with_its_result(tenant, create_order) -> None:
    record = reserve(tenant, create_order).record
    complete_execution(
        record=record, fencing_token=1, outcome=Outcome.SUCCEEDED, actor="w", result={"id": 7}
    )
    answer = _answer(refresh(record), create_order)
    assert answer is not None and answer.decision is Decision.RECORDED_RESULT
    assert answer.record.result == {"id": 7}


def test_a_failure_that_is_not_replayed_is_answered_with_its_error(tenant, create_order) -> None:
    record = reserve(tenant, create_order).record
    _fail(record, 1)  # create_order is never replayed automatically
    answer = _answer(refresh(record), create_order)
    assert answer is not None
    assert (answer.decision, answer.code) == (Decision.RECORDED_RESULT, ObservationCode.FAILED)


@pytest.mark.parametrize(
    "case", ["lease_gone_silent", "other_fingerprint", "unknown", "awaiting_approval", "replay"]
)
def test_answers_that_need_the_lock_are_not_given_as_seen(
    tenant, create_order, read_file, case: str
) -> None:
    """A lease gone silent turns the record unknown, a conflict is audited, an unknown
    record's answer may start a look-up or an approval, an approval is asked for, a replay
    starts an execution: each is given only under the record's lock."""
    tool, lapsed, params = create_order, None, None
    if case == "awaiting_approval":
        record = reserve(tenant, create_order, requires_approval=True).record
    elif case == "replay":
        tool = read_file  # replayed automatically after a retryable failure
        record = reserve(tenant, read_file, key="k-read").record
        _fail(record, 1)
    else:
        record = reserve(tenant, create_order).record
    if case == "lease_gone_silent":
        lapsed = True  # as a statement a second after the lease's end reads it
    elif case == "other_fingerprint":
        params = {"cart": "cart-1", "amount": 2}
    elif case == "unknown":
        complete_execution(record=record, fencing_token=1, outcome=Outcome.UNCERTAIN, actor="w")
        assert refresh(record).state == RecordState.UNKNOWN
    assert _answer(refresh(record), tool, params=params, lapsed=lapsed) is None


@pytest.mark.parametrize("change", ["completed", "heartbeat", "replayed_to_the_same_state"])
def test_a_duplicate_is_counted_only_while_its_record_is_as_seen(
    tenant, create_order, change: str
) -> None:
    """Whatever changed the record since it was read (its state, its lease, or a replay that
    ended in the same state under a new fencing token), the stale answer is not given."""
    record = reserve(tenant, create_order).record
    if change == "replayed_to_the_same_state":
        _fail(record, 1)
        stale = refresh(record)
        # An approved replay: the record executes again under token 2, then fails the same way.
        entry = granted_entry(record, create_order)
        start_execution(record=refresh(record), entry=entry, lease_owner="w2", actor="ops")
        _fail(refresh(record), 2)
        assert refresh(record).state == stale.state == RecordState.FAILED_FINAL
    else:
        stale = refresh(record)
        if change == "completed":
            complete_execution(
                record=record, fencing_token=1, outcome=Outcome.SUCCEEDED, actor="w", result={}
            )
        else:
            heartbeat(record=record, fencing_token=1, lease_seconds=600)
    entries = LedgerEntry.objects.count()

    assert count_duplicate_as_seen(stale, _duplicate_entry(stale, create_order)) is False
    assert LedgerEntry.objects.count() == entries  # nothing written
    assert refresh(record).duplicate_hits == 0

    seen = refresh(record)
    entry = _duplicate_entry(seen, create_order)
    assert count_duplicate_as_seen(seen, entry) is True
    stored = LedgerEntry.objects.get(pk=entry.pk)
    assert stored.record_id == record.pk and stored.decision == entry.decision
    assert refresh(record).duplicate_hits == seen.duplicate_hits == 1
    assert count_duplicate_as_seen(seen, _duplicate_entry(seen, create_order)) is True
    assert refresh(record).duplicate_hits == seen.duplicate_hits == 2


def test_a_lease_that_lapsed_since_the_read_counts_nothing(tenant, create_order) -> None:
    """Unchanged, but its holder went silent by the time the duplicate is counted: the locked
    way marks it unknown instead of answering ``wait``."""
    record = reserve(tenant, create_order).record
    IdempotencyRecord.objects.filter(pk=record.pk).update(
        lease_expires_at=Now() - timedelta(seconds=1)
    )
    seen = refresh(record)
    assert _answer(seen, create_order) is None  # as read now; read earlier, it was ``wait``
    entry = _duplicate_entry(seen, create_order, Decision.WAIT)
    assert count_duplicate_as_seen(seen, entry) is False
    assert refresh(record).duplicate_hits == 0


def test_a_record_gone_since_it_was_read_counts_nothing(tenant, create_order) -> None:
    """Expired and cleaned up in between: the locked way then takes the key anew."""
    seen = refresh(reserve(tenant, create_order).record)
    entry = _duplicate_entry(seen, create_order)
    IdempotencyRecord.objects.filter(pk=seen.pk).delete()
    entries = LedgerEntry.objects.count()
    assert count_duplicate_as_seen(seen, entry) is False
    assert LedgerEntry.objects.count() == entries


# A record's fields the state table reads, and those that move without a change of state.
FIELDS = {
    "state": st.sampled_from(RecordState),
    "requires_approval": st.booleans(),
    "error": st.sampled_from([None, {"code": "UPSTREAM_5XX"}, {"code": "NOT_FOUND"}]),
    "error_retryable": st.booleans(),
    "fencing_token": st.integers(min_value=0, max_value=2),
    "result": st.sampled_from([None, {"id": 1}]),
    "lease_minutes": st.sampled_from([-1, 1, 2]),  # negative: lapsed
}
# What a holder's token settles once: these change only with the state or the token.
SETTLED = {"error", "result"}


def _set(record: IdempotencyRecord, values: dict, at: datetime) -> None:
    """Give ``record`` ``values``, with what its state's check constraints require, its times
    counted from ``at``: the same values give the same row."""
    values = dict(values)
    state = values["state"]
    minutes = values.pop("lease_minutes")
    executing = state is RecordState.EXECUTING
    terminal = state in (RecordState.SUCCEEDED, RecordState.FAILED_FINAL)
    IdempotencyRecord.objects.filter(pk=record.pk).update(
        **values,
        lease_owner="w" if executing else "",
        lease_expires_at=at + timedelta(minutes=minutes) if executing else None,
        expires_at=at + timedelta(days=1) if terminal else None,
        completed_at=at if terminal else None,
    )


def _lapsed_by_the_database(record: IdempotencyRecord) -> bool:
    table = quote(IdempotencyRecord._meta.db_table)
    lapsed = RawSQL(lapsed_sql(table), [], BooleanField())  # noqa: S611 - from metadata
    return IdempotencyRecord.objects.filter(lapsed, pk=record.pk).exists()


def _locked_answer(record: IdempotencyRecord, tool: Tool, policy: ReplayPolicy, params) -> tuple:
    """What ``reserve_key`` answers under the record's lock, everything it wrote undone."""
    with transaction.atomic():
        reservation = reserve_key(
            tenant=record.tenant,
            tool=tool,
            key=record.key,
            fingerprint=fingerprint(params),
            replay_policy=policy,
            data_classification=DataClassification.INTERNAL,
            lease_owner="w2",
            actor="w2",
            taken=True,
        )
        transaction.set_rollback(True)
    answer = (reservation.decision, reservation.code, reservation.next_action)
    return (*answer, reservation.record.result, reservation.record.error)


@settings(deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    read=st.fixed_dictionaries(FIELDS),
    data=st.data(),
    policy=st.sampled_from(ReplayPolicy),
    same_input=st.booleans(),
)
def test_an_answer_given_as_seen_is_the_locked_answer_of_the_record_it_is_counted_on(
    tenant, create_order, read, data, policy, same_input
) -> None:
    """For every state and field values as read, a duplicate of the record as read is counted;
    and whichever of them changed before the count (the result and the error only with the
    state or the token), a duplicate counted as seen got the answer, result and error the
    record's lock would give."""
    unsettled = sorted(FIELDS.keys() - SETTLED)
    changed = data.draw(st.sets(st.sampled_from(unsettled), min_size=1, max_size=2))
    counted_on = {**read, **{name: data.draw(FIELDS[name], label=name) for name in changed}}
    if any(counted_on[name] != read[name] for name in ("state", "fencing_token")):
        counted_on |= {name: data.draw(FIELDS[name], label=name) for name in SETTLED}
    params = {"cart": "cart-1"} if same_input else {"cart": "other"}
    with transaction.atomic():
        record = reserve(tenant, create_order, key="k-as-seen").record
        at = db_now()
        _set(record, read, at)
        seen = refresh(record)
        answer = answer_as_seen(
            seen,
            fingerprint=fingerprint(params),
            replay_policy=policy,
            lapsed=_lapsed_by_the_database(seen),
        )
        if answer is not None:
            entry = partial(_duplicate_entry, seen, create_order, answer.decision)
            assert count_duplicate_as_seen(seen, entry())  # as read: always counted
            _set(record, counted_on, at)
            if count_duplicate_as_seen(seen, entry()):
                given = (answer.decision, answer.code, answer.next_action)
                given += (answer.record.result, answer.record.error)
                assert given == _locked_answer(record, create_order, policy, params)
        transaction.set_rollback(True)
