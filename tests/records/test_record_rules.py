"""The rules about a record read both in Python and as a query: each query form gives the same
answer as its Python form over every state a record can be in, and each is built from the
declaration it stands for."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.db.models import BooleanField, Q
from django.db.models.expressions import RawSQL
from django.db.models.functions import Now

from ledger.decisions import failure_is_final
from ledger.domain import FINAL_ERROR_CODES, TERMINAL_RECORD_STATES, RecordState
from ledger.models import IdempotencyRecord, LedgerEntry, Tenant, Tool, WritePlan
from ledger.records import Outcome, resolve_unknown, transitions
from ledger.records.escalation import claimable_sql
from ledger.sql.statements import quote
from reconcile import services as reconcile_services
from reconcile.coverage import write_plan_workspaces
from tests.factories import make_entry, refresh, reserve

pytestmark = pytest.mark.django_db

ERRORS: list[dict[str, Any] | None] = [
    None,
    {},
    {"message": "no code"},
    {"code": None},
    {"code": 503},
    {"code": "UPSTREAM_5XX"},
    {"code": "TIMEOUT"},
    *({"code": code} for code in sorted(FINAL_ERROR_CODES)),
]

#: Every state, with every error and either word of its reporter on whether it may be retried.
CASES = [
    (state, error, retryable)
    for state in RecordState
    for error in ERRORS
    for retryable in (True, False)
]


def _case_id(case: tuple[RecordState, dict[str, Any] | None, bool]) -> str:
    state, error, retryable = case
    return f"{state}-{error}-{'retryable' if retryable else 'final'}"


def _as(
    record: IdempotencyRecord, state: RecordState, error: dict[str, Any] | None, retryable: bool
) -> IdempotencyRecord:
    """``record`` put in ``state`` with ``error``, as the constraints allow it to be."""
    terminal = state in TERMINAL_RECORD_STATES
    IdempotencyRecord.objects.filter(pk=record.pk).update(
        state=state,
        error=error,
        error_retryable=retryable,
        lease_owner="w",
        lease_expires_at=Now() + timedelta(minutes=5),
        expires_at=Now() + timedelta(days=1) if terminal else None,
    )
    return refresh(record)


def _matches(entry: LedgerEntry, condition: Q) -> bool:
    """Whether ``condition``, over the entry's record (``record__``), holds."""
    return LedgerEntry.objects.filter(condition, pk=entry.pk).exists()


@pytest.fixture
def entry(tenant: Tenant, read_file: Tool) -> LedgerEntry:
    """An entry of a record the tests put in each state."""
    entry = make_entry(tenant, read_file)
    entry.record = reserve(tenant, read_file, key="k-rules").record
    entry.save(update_fields=["record"])
    return entry


@pytest.mark.parametrize("case", CASES, ids=[_case_id(case) for case in CASES])
def test_waiting_to_start_is_one_rule_in_python_and_as_a_query(entry: LedgerEntry, case) -> None:
    assert entry.record is not None
    record = _as(entry.record, *case)
    in_python = record.waits_to_start
    assert _matches(entry, IdempotencyRecord.waits_to_start_q("record__")) is in_python
    assert (
        IdempotencyRecord.objects.filter(
            IdempotencyRecord.waits_to_start_q(), pk=record.pk
        ).exists()
        is in_python
    )


def test_a_record_waits_to_start_in_the_states_an_approved_start_leaves(
    entry: LedgerEntry,
) -> None:
    assert entry.record is not None
    waiting = {case[0] for case in CASES if _as(entry.record, *case).waits_to_start}
    assert waiting == transitions.STARTED.sources


@pytest.mark.parametrize(
    ("error", "retryable", "waits"),
    [
        ({"code": "UPSTREAM_5XX"}, True, True),
        ({"code": "UPSTREAM_5XX"}, False, False),
        ({"code": "PERMISSION_DENIED"}, True, False),
    ],
    ids=["retryable", "not_retryable", "final_code_reported_retryable"],
)
def test_a_failed_record_waits_to_start_only_while_it_failed_retryably(
    entry: LedgerEntry, error: dict[str, Any], retryable: bool, waits: bool
) -> None:
    assert entry.record is not None
    record = _as(entry.record, RecordState.FAILED_FINAL, error, retryable)
    assert (record.waits_to_start, record.failed_retryably) == (waits, waits)


@pytest.mark.parametrize("case", CASES, ids=[_case_id(case) for case in CASES])
def test_the_query_of_a_retryable_failure_is_failure_is_final(entry: LedgerEntry, case) -> None:
    assert entry.record is not None
    state, error, retryable = case
    _as(entry.record, state, error, retryable)
    code = (error or {}).get("code")
    expected = state is RecordState.FAILED_FINAL and not failure_is_final(
        error_code=code, retryable=retryable
    )
    assert _matches(entry, IdempotencyRecord.failed_retryably_q("record__")) is expected


@pytest.mark.parametrize(
    "error", [None, {"code": "TIMEOUT"}, {"code": "NOT_FOUND"}], ids=["none", "timeout", "final"]
)
def test_a_failure_a_human_resolved_is_retryable_unless_its_code_is_final(
    entry: LedgerEntry, error: dict[str, Any] | None
) -> None:
    """``transitions.RESOLVED[FAILED]`` stores ``error_retryable``: the code still decides."""
    assert entry.record is not None
    _as(entry.record, RecordState.UNKNOWN, None, False)
    record = resolve_unknown(
        record=entry.record, outcome=Outcome.FAILED, actor="ops", error=error, detail="checked"
    )
    stored = refresh(record)
    assert stored.error_retryable
    expected = not failure_is_final(error_code=(error or {}).get("code"), retryable=True)
    assert stored.failed_retryably is expected
    assert _matches(entry, IdempotencyRecord.failed_retryably_q("record__")) is expected


#: An unknown record's look-up claim: none, one that lapsed, one a worker holds.
CLAIMS = {"no_claim": None, "claim_lapsed": -1, "claim_held": 1}

LOOKUP_CASES = [
    (state, escalated, claim)
    for state in RecordState
    for escalated in (True, False)
    for claim in CLAIMS
]


def _escalated_and_claimed(
    record: IdempotencyRecord, state: RecordState, escalated: bool, claim: str
) -> IdempotencyRecord:
    _as(record, state, None, False)
    minutes = CLAIMS[claim]
    IdempotencyRecord.objects.filter(pk=record.pk).update(
        escalated_at=Now() if escalated else None,
        reconcile_claimed_until=None if minutes is None else Now() + timedelta(minutes=minutes),
    )
    return refresh(record)


@pytest.mark.parametrize(
    "case", LOOKUP_CASES, ids=["-".join(map(str, case)) for case in LOOKUP_CASES]
)
def test_escalated_is_one_rule_in_python_and_as_a_query(entry: LedgerEntry, case) -> None:
    assert entry.record is not None
    record = _escalated_and_claimed(entry.record, *case)
    assert record.escalated is case[1]
    assert _matches(entry, IdempotencyRecord.escalated_q("record__")) is record.escalated


@pytest.mark.parametrize(
    "case", LOOKUP_CASES, ids=["-".join(map(str, case)) for case in LOOKUP_CASES]
)
def test_awaiting_a_look_up_is_one_rule_as_a_query_and_in_sql(entry: LedgerEntry, case) -> None:
    """Unknown, not escalated, and no worker's claim still held, by the database's clock."""
    assert entry.record is not None
    record = _escalated_and_claimed(entry.record, *case)
    state, escalated, claim = case
    expected = state is RecordState.UNKNOWN and not escalated and claim != "claim_held"
    table = quote(IdempotencyRecord._meta.db_table)
    claimable = RawSQL(claimable_sql(table), [], BooleanField())  # noqa: S611 - from metadata
    by_sql = IdempotencyRecord.objects.filter(claimable, pk=record.pk).exists()
    assert (_matches(entry, IdempotencyRecord.awaiting_lookup_q("record__")), by_sql) == (
        expected,
        expected,
    )


def test_an_actions_write_plan_is_its_first_calls_in_python_in_sql_and_for_many(
    tenant: Tenant, read_file: Tool
) -> None:
    """Three calls of one action, the second and third with a plan: the action's plan is the
    second call's, read by the record, by the worker's claim (SQL) and for a list of records."""
    record = reserve(tenant, read_file, key="k-plans").record
    entries = [make_entry(tenant, read_file) for _ in range(3)]
    for entry in entries:
        entry.record = record
        entry.save(update_fields=["record"])
    plans = [
        WritePlan.objects.create(
            tenant=tenant,
            entry=entry,
            workspace=f"ws-{n}",
            path="a.py",
            before_hash="0" * 64,
            after_hash="1" * 64,
        )
        for n, entry in enumerate(entries[1:])
    ]
    IdempotencyRecord.objects.filter(pk=record.pk).update(state=RecordState.UNKNOWN)
    assert refresh(record).write_plan == plans[0]
    claimed = reconcile_services._claim(record.pk)
    assert claimed is not None and claimed[2] == plans[0]
    assert write_plan_workspaces([record.pk]) == {record.pk: "ws-0"}
