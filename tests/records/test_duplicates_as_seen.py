"""A duplicate answered from its record as read, without the record's lock or a transaction
(``records.answer_as_seen`` and ``count_duplicate_as_seen``): only ``wait`` and
``recorded_result``, and only while the record is still as it was read."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from ledger.domain import Decision, ObservationCode, RecordState, ReplayPolicy
from ledger.keys import fingerprint
from ledger.models import IdempotencyRecord, LedgerEntry, Tool
from ledger.services.records import (
    Outcome,
    answer_as_seen,
    complete_execution,
    count_duplicate_as_seen,
)
from tests.factories import make_run, make_tool, refresh, reserve

pytestmark = pytest.mark.django_db


@pytest.fixture
def create_order(tenant) -> Tool:
    return make_tool(tenant, "create_order")


def _answer(seen: IdempotencyRecord, tool: Tool, *, params=None, now=None):
    return answer_as_seen(
        seen,
        fingerprint=fingerprint(params if params is not None else {"cart": "cart-1"}),
        replay_policy=ReplayPolicy(tool.replay_policy),
        now=now or timezone.now(),
    )


def _duplicate_entry(seen: IdempotencyRecord, tool: Tool) -> LedgerEntry:
    """An unsaved entry of a duplicate that waits, as the hot path builds it."""
    return LedgerEntry(
        tenant_id=seen.tenant_id,
        step_id="step-dup",
        run=make_run(seen.tenant),
        tool=tool,
        input_hash=seen.fingerprint,
        input={"cart": "cart-1"},
        status="planned",
        idempotency=tool.idempotency,
        replay_policy=tool.replay_policy,
        classification_reason=tool.reason,
        classification_rule=tool.rule,
        idempotency_key=seen.key,
        record=seen,
        decision=Decision.WAIT,
        observation_code=ObservationCode.IN_PROGRESS.value,
        input_source="model",
        data_classification="internal",
        reused_record=True,
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


@pytest.mark.parametrize("case", ["lease_gone_silent", "other_fingerprint", "unknown"])
def test_answers_that_change_the_record_are_left_to_the_locked_way(
    tenant, create_order, case: str
) -> None:
    """A lease gone silent turns the record unknown, a conflict is audited, an unknown
    record's answer may start a look-up or an approval: each needs the lock."""
    record = reserve(tenant, create_order).record
    now = None
    params = None
    if case == "lease_gone_silent":
        now = refresh(record).lease_expires_at + timedelta(seconds=1)  # type: ignore[operator]
    elif case == "other_fingerprint":
        params = {"cart": "cart-1", "amount": 2}
    else:
        complete_execution(record=record, fencing_token=1, outcome=Outcome.UNCERTAIN, actor="w")
        assert refresh(record).state == RecordState.UNKNOWN
    assert _answer(refresh(record), create_order, params=params, now=now) is None


def test_a_duplicate_is_counted_only_while_its_record_is_as_seen(tenant, create_order) -> None:
    record = reserve(tenant, create_order).record
    stale = refresh(record)
    complete_execution(
        record=record, fencing_token=1, outcome=Outcome.SUCCEEDED, actor="w", result={"id": 7}
    )
    entries = LedgerEntry.objects.count()

    assert count_duplicate_as_seen(stale, _duplicate_entry(stale, create_order)) is False
    assert LedgerEntry.objects.count() == entries  # nothing written
    assert refresh(record).duplicate_hits == 0

    seen = refresh(record)
    entry = _duplicate_entry(seen, create_order)
    assert count_duplicate_as_seen(seen, entry) is True
    stored = LedgerEntry.objects.get(pk=entry.pk)
    assert stored.record_id == record.pk and stored.decision == Decision.WAIT
    assert refresh(record).duplicate_hits == seen.duplicate_hits == 1


def test_a_record_gone_since_it_was_read_counts_nothing(tenant, create_order) -> None:
    """Expired and cleaned up in between: the locked way then takes the key anew."""
    seen = refresh(reserve(tenant, create_order).record)
    IdempotencyRecord.objects.filter(pk=seen.pk).delete()
    entries = LedgerEntry.objects.count()
    assert count_duplicate_as_seen(seen, _duplicate_entry(seen, create_order)) is False
    assert LedgerEntry.objects.count() == entries
