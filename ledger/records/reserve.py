"""Taking a key: the first call of a key in one statement, a duplicate answered from the
record that has it (DESIGN section 3, the state table), and a waiting record started.

Reservation is a single ``INSERT ... ON CONFLICT DO NOTHING``, so it is atomic across any
number of callers and web processes. The loser is answered from the existing row: as its
statement read it when the answer changes nothing (``ledger.records.as_seen``), else under
the row's lock (``reserve_key``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from functools import cache
from typing import Any

from django.conf import settings
from django.db import connection, transaction
from django.db.models import Model, UniqueConstraint

from ledger import deadline, shadow
from ledger.decisions import ExistingRecordAnswer, answer_existing_record
from ledger.domain import (
    POLICY_FOR,
    DataClassification,
    Decision,
    ObservationCode,
    RecordState,
    ReplayPolicy,
)
from ledger.errors import InvalidTransition
from ledger.models import (
    AuditEvent,
    IdempotencyRecord,
    LedgerEntry,
    Run,
    Tenant,
    Tool,
    VersionCombination,
)
from ledger.records import transitions
from ledger.records.lease import begin_execution, expire_lapsed, lapsed_sql, lease_seconds_granted
from ledger.records.locking import lock_by_key, lock_record
from ledger.services import approvals
from ledger.services.audit import audit, audit_event
from ledger.sql.statements import (
    DbTime,
    from_row,
    insert_parts,
    model_field,
    quote,
    run_precompiled,
    select_columns,
)


@dataclass(frozen=True, slots=True)
class Reservation:
    """The outcome of ``reserve_key``: the record and what the caller should do."""

    record: IdempotencyRecord
    created: bool
    decision: Decision
    code: ObservationCode | None
    next_action: str


_CLASS_OF_POLICY = {policy: idempotency for idempotency, policy in POLICY_FOR.items()}


@dataclass(frozen=True, slots=True)
class FirstCall:
    """What ``reserve_new_key`` did: the record it created, or else the key's record as its
    statement read it (unlocked; None when there was none it could see) and whether, by the
    database's clock in that statement, its lease had lapsed."""

    created: IdempotencyRecord | None
    seen: IdempotencyRecord | None
    seen_lapsed: bool = False


def executing_record(
    *,
    tenant: Tenant,
    tool: Tool,
    key: str,
    fingerprint: str,
    replay_policy: ReplayPolicy,
    lease_owner: str,
    actor: str,
    run: Run,
    entry: LedgerEntry,
) -> tuple[IdempotencyRecord, AuditEvent]:
    """The record of a key taken for the first time by the call of ``entry`` (the ledger entry,
    unsaved), executing at once, and its audit event, both unsaved: what ``reserve_new_key``
    and ``reserve_new_keys`` write. The action takes the data classification of ``entry``'s
    call, and ``entry`` the record's fencing token."""
    record, event = _new_record(
        tenant=tenant,
        tool=tool,
        key=key,
        fingerprint=fingerprint,
        replay_policy=replay_policy,
        data_classification=DataClassification(entry.data_classification),
        lease_owner=lease_owner,
        actor=actor,
        source=AuditEvent.Source.API,
        run=run,
        combination=run.combination,
    )
    entry.fencing_token = record.fencing_token
    return record, event


def reserve_new_key(record: IdempotencyRecord, event: AuditEvent, entry: LedgerEntry) -> FirstCall:
    """The hot path's common case in one statement: take ``record``'s key for the first time,
    executing at once, with its audit ``event`` and ``entry`` (saved pointing at the record;
    all three from ``executing_record``). One statement is atomic by itself, so no transaction
    is opened (no ``BEGIN``/``COMMIT`` round trips).

    When the key is already taken it writes nothing, and the same statement reads the key's
    record (unlocked): a duplicate can often be answered from it (``answer_as_seen``). Else
    the caller goes the general way (``reserve_key`` in a transaction, told the key is
    ``taken``), which answers from the locked record."""
    deadline.check()
    return _insert_if_absent(record, event, entry=entry)


def reserve_new_keys(
    firsts: Sequence[tuple[IdempotencyRecord, AuditEvent, LedgerEntry]],
) -> list[IdempotencyRecord | None]:
    """``reserve_new_key`` for several keys, all different, in one statement: the calls of a
    model turn (``calls.record_calls``). Each key not yet taken gets its record, audit event
    and entry, as ``reserve_new_key`` would write them; a taken key gets nothing written and
    None in its place (its call is then decided alone, as its duplicate). The one statement
    is atomic: store trouble writes none of them."""
    deadline.check()
    n = _first_call_names()
    rows: list[str] = []
    params: list[Any] = []
    columns = ""
    # In the keys' order, whatever the calls' order: two statements that take keys they share
    # wait on each other's in one order, never in a cycle (a deadlock).
    for record, _event, _entry in sorted(firsts, key=lambda first: first[0].key):
        columns, values, row_params = insert_parts(record)
        rows.append(f"({values})")
        params += row_params
    # Identifiers come from the models' metadata, values are parameters: nothing from input.
    ctes = [
        f"inserted AS (INSERT INTO {n['record']} ({columns}) "  # noqa: S608
        f"VALUES {', '.join(rows)} ON CONFLICT ON CONSTRAINT {n['unique']} DO NOTHING "
        f"RETURNING {n['id']} AS id, {n['lease']} AS lease, {n['key']} AS taken)"
    ]
    for index, (record, event, entry) in enumerate(firsts):
        audit_columns, audit_values, audit_params = insert_parts(
            event, expressions={"target_id": ("inserted.id::text", [])}
        )
        entry_columns, entry_values, entry_params = insert_parts(
            entry, expressions={"record_id": ("inserted.id", [])}
        )
        ctes += [
            f"a{index} AS (INSERT INTO {quote(AuditEvent._meta.db_table)} ({audit_columns}) "  # noqa: S608
            f"SELECT {audit_values} FROM inserted WHERE inserted.taken = %s)",
            f"e{index} AS (INSERT INTO {quote(LedgerEntry._meta.db_table)} ({entry_columns}) "  # noqa: S608
            f"SELECT {entry_values} FROM inserted WHERE inserted.taken = %s "
            f"RETURNING {n['entry_id']} AS entry_id, {n['entry_record']} AS record_id, "
            f"{index} AS n)",
        ]
        params += [*audit_params, record.key, *entry_params, record.key]
    entered = " UNION ALL ".join(f"SELECT * FROM e{i}" for i in range(len(firsts)))  # noqa: S608
    # One row of arrays, in the calls' order (n): the entries written, their records and leases.
    sql = (
        f"WITH {', '.join(ctes)} "  # noqa: S608
        "SELECT array_agg(n ORDER BY n), array_agg(entry_id ORDER BY n), "
        "array_agg(id ORDER BY n), array_agg(lease ORDER BY n) "
        f"FROM ({entered}) AS entered JOIN inserted ON id = record_id"
    )
    row, _count = run_precompiled(sql, params)
    created: list[IdempotencyRecord | None] = [None] * len(firsts)
    assert row is not None
    for index, entry_id, record_id, lease in zip(*(column or [] for column in row), strict=True):
        record, _event, entry = firsts[index]
        record.pk, record.lease_expires_at = record_id, lease
        record._state.adding = False
        entry.pk, entry.record = entry_id, record
        entry._state.adding = False
        created[index] = record
    return created


def _insert_if_absent(
    record: IdempotencyRecord, event: AuditEvent, *, entry: LedgerEntry | None = None
) -> FirstCall:
    """INSERT the record unless its (tenant, key) exists, and its audit ``event`` with it (one
    statement: the event is written only if the record was), its lease ending by the
    database's clock. With ``entry`` (the ledger entry, written too, pointing at the new
    record) when the key was taken, the statement also reads the key's record (None when it was
    committed after the statement began, too late for its snapshot) and judges its lease by
    the database's clock."""
    n = _first_call_names()
    columns, values, params = insert_parts(record)
    audit_columns, audit_values, audit_params = insert_parts(
        event, expressions={"target_id": ("inserted.id::text", [])}
    )
    # Identifiers come from the models' metadata, values are parameters: nothing from input.
    sql = (
        f"WITH inserted AS (INSERT INTO {n['record']} ({columns}) "  # noqa: S608
        f"VALUES ({values}) ON CONFLICT ON CONSTRAINT {n['unique']} DO NOTHING "
        f"RETURNING {n['id']} AS id, {n['lease']} AS lease), "
        f"audited AS (INSERT INTO {quote(AuditEvent._meta.db_table)} ({audit_columns}) "
        f"SELECT {audit_values} FROM inserted) "
    )
    params += audit_params
    if entry is None:
        sql += "SELECT id, lease FROM inserted"
    else:
        entry_columns, entry_values, entry_params = insert_parts(
            entry, expressions={"record_id": ("inserted.id", [])}
        )
        # The key's record is read only when nothing was inserted (a one-time filter), in the
        # statement's snapshot: the inserting CTE's own row is not visible to it.
        sql += (
            f", entered AS (INSERT INTO {quote(LedgerEntry._meta.db_table)} ({entry_columns}) "  # noqa: S608
            f"SELECT {entry_values} FROM inserted RETURNING {n['entry_id']} AS id) "
            "SELECT (SELECT id FROM inserted), (SELECT lease FROM inserted), "
            f"(SELECT id FROM entered), {lapsed_sql('r')}, "
            f"{select_columns(IdempotencyRecord, 'r')} FROM (SELECT 1) AS one "
            f"LEFT JOIN {n['record']} r "
            f"ON NOT EXISTS (SELECT 1 FROM inserted) AND r.{n['tenant']} = %s AND r.{n['key']} = %s"
        )
        tenant_id = Tenant._meta.pk.get_db_prep_value(record.tenant_id, connection)
        params += [*entry_params, tenant_id, record.key]
    row, _count = run_precompiled(sql, params)
    if row is None:  # without ``entry``: nothing inserted
        return FirstCall(None, None)
    if row[0] is None:  # with ``entry`` there is always a row
        seen = from_row(IdempotencyRecord, row[4:])
        assert seen is None or isinstance(seen, IdempotencyRecord)
        return FirstCall(None, seen, bool(row[3]))
    record.pk = row[0]
    record.lease_expires_at = row[1]
    record._state.adding = False
    if entry is not None:
        entry.pk = row[2]
        entry.record = record
        entry._state.adding = False
    return FirstCall(record, None)


@cache
def _first_call_names() -> dict[str, str]:
    """The identifiers ``_insert_if_absent`` names, from the models' metadata."""

    def column(model: type[Model], name: str) -> str:
        return quote(str(model_field(model, name).column))

    (unique,) = (
        c.name
        for c in IdempotencyRecord._meta.constraints
        if isinstance(c, UniqueConstraint) and tuple(c.fields) == ("tenant", "key")
    )
    return {
        "record": quote(IdempotencyRecord._meta.db_table),
        "unique": quote(unique),
        "id": column(IdempotencyRecord, "pk"),
        "lease": column(IdempotencyRecord, "lease_expires_at"),
        "tenant": column(IdempotencyRecord, "tenant"),
        "key": column(IdempotencyRecord, "key"),
        "entry_id": column(LedgerEntry, "pk"),
        "entry_record": column(LedgerEntry, "record"),
    }


def _new_record(
    *,
    tenant: Tenant,
    tool: Tool,
    key: str,
    fingerprint: str,
    replay_policy: ReplayPolicy,
    data_classification: DataClassification,
    lease_owner: str,
    actor: str,
    source: str,
    requires_approval: bool = False,
    run: Run | None = None,
    combination: VersionCombination | None = None,
    ttl_seconds: int | None = None,
    lease_seconds: int | None = None,
) -> tuple[IdempotencyRecord, AuditEvent]:
    """The unsaved record for a key taken for the first time, and its audit event: executing
    at once (lease and fencing token 1; the lease's end is the database's clock plus the
    lease, written by the INSERT), or only reserved when an approval comes first."""
    record = IdempotencyRecord(
        tenant=tenant,
        key=key,
        tool=tool,
        fingerprint=fingerprint,
        data_classification=data_classification.value,
        ttl_seconds=ttl_seconds or settings.LEDGER_DEFAULT_TTL_SECONDS,
        run=run,
        combination=combination,
        requires_approval=requires_approval,
        classified_as=_CLASS_OF_POLICY[replay_policy],
        shadow=run is not None and shadow.is_shadow(run),
    )
    if requires_approval:
        record.state = RecordState.RESERVED
    else:
        record.state = RecordState.EXECUTING
        record.lease_owner = lease_owner
        record.lease_expires_at = DbTime(lease_seconds_granted(lease_seconds))  # type: ignore[assignment]
        record.fencing_token = 1
        record.executions = 1
    event = audit_event(
        tenant=tenant,
        actor=actor,
        action="record.reserved" if requires_approval else transitions.STARTED.action,
        target=("idempotencyrecord", ""),  # the id is the inserted one (see _insert_if_absent)
        source=source,
        after=transitions.snapshot(record),
    )
    return record, event


def reserve_key(
    *,
    tenant: Tenant,
    tool: Tool,
    key: str,
    fingerprint: str,
    replay_policy: ReplayPolicy,
    data_classification: DataClassification,
    lease_owner: str,
    actor: str,
    source: str = AuditEvent.Source.API,
    requires_approval: bool = False,
    run: Run | None = None,
    combination: VersionCombination | None = None,
    ttl_seconds: int | None = None,
    lease_seconds: int | None = None,
    taken: bool = False,
) -> Reservation:
    """Take ``key`` for one business action, or answer from the record that already has it.

    A new key starts executing at once (lease and fencing token 1), or is only reserved when
    the action needs an approval first; it keeps ``data_classification``, its input's, which
    decides what is stored of its outcome. An existing key is answered by the state table of
    DESIGN section 3; it is never executed a second time unless the replay decision allows it.
    ``taken``: the caller has just seen the key taken (``reserve_new_key`` wrote nothing), so
    the existing record is locked first, and a new one is inserted only if it has gone since
    (expired and cleaned up in between).
    """
    # No savepoint of its own: inside a caller's transaction (the API's) an error here rolls
    # the whole call back anyway, and alone it is a transaction of its own.
    with transaction.atomic(savepoint=False):
        existing = lock_by_key(tenant.pk, key) if taken else None
        deadline.check()  # after the wait for the lock: the caller may have given up by now
        if existing is None:
            record, event = _new_record(
                tenant=tenant,
                tool=tool,
                key=key,
                fingerprint=fingerprint,
                replay_policy=replay_policy,
                data_classification=data_classification,
                lease_owner=lease_owner,
                actor=actor,
                source=source,
                requires_approval=requires_approval,
                run=run,
                combination=combination,
                ttl_seconds=ttl_seconds,
                lease_seconds=lease_seconds,
            )
            if _insert_if_absent(record, event).created is not None:
                if requires_approval:
                    return Reservation(
                        record,
                        True,
                        Decision.APPROVAL_REQUIRED,
                        ObservationCode.APPROVAL_REQUIRED,
                        "await_approval",
                    )
                return Reservation(record, True, Decision.EXECUTE, None, "execute")
            existing = lock_by_key(tenant.pk, key)
            if existing is None:
                raise IdempotencyRecord.DoesNotExist(f"key {key!r} was taken, then not found")
        record, now, lapsed = existing
        answer = answer_locked(
            record,
            fingerprint=fingerprint,
            replay_policy=replay_policy,
            lease_owner=lease_owner,
            lease_seconds=lease_seconds,
            actor=actor,
            source=source,
            now=now,
            lapsed=lapsed,
        )
        return _answered(record, answer, actor=actor, source=source)


def _answered(
    existing: IdempotencyRecord, answer: ExistingRecordAnswer, *, actor: str, source: str
) -> Reservation:
    """A duplicate answered from its key's locked record: a conflict audited, any other answer
    but a replay counted on the record."""
    if answer.reexecute:
        return Reservation(existing, False, Decision.EXECUTE, None, "execute")
    if answer.decision is Decision.CONFLICT:
        audit(
            tenant=existing.tenant_id,
            actor=actor,
            action="record.key_conflict",
            target=existing,
            source=source,
            outcome=AuditEvent.Result.DENIED,
            detail="Same idempotency key with a different request fingerprint.",
        )
    else:
        run_precompiled(count_duplicate_sql(), [existing.pk])
        existing.duplicate_hits += 1
    return Reservation(existing, False, answer.decision, answer.code, answer.next_action)


def answer_locked(
    existing: IdempotencyRecord,
    *,
    fingerprint: str,
    replay_policy: ReplayPolicy,
    replay: bool = False,
    now: datetime,
    lapsed: bool,
    lease_owner: str,
    lease_seconds: int | None = None,
    actor: str,
    source: str,
) -> ExistingRecordAnswer:
    """The state table's answer from a key's row-locked record, read at ``now`` (the
    database's clock with the lock) with its lease ``lapsed`` or not by that clock, for a
    duplicate or, with ``replay``, the runtime's request to recover the call. A lapsed lease
    makes the record unknown first; an answer that lets the caller execute again replays the
    record for ``lease_owner`` (``transitions.REPLAYED``: a new lease and fencing token)."""
    if lapsed:
        expire_lapsed(existing, now=now, source=source)
    answer = state_table_answer(existing, fingerprint, replay_policy, replay=replay)
    if answer.reexecute:
        begin_execution(
            transitions.REPLAYED,
            existing,
            lease_owner=lease_owner,
            actor=actor,
            source=source,
            now=now,
            lease_seconds=lease_seconds,
        )
    return answer


def state_table_answer(
    record: IdempotencyRecord,
    fingerprint: str,
    replay_policy: ReplayPolicy,
    *,
    replay: bool = False,
) -> ExistingRecordAnswer:
    return answer_existing_record(
        state=RecordState(record.state),
        fingerprint_matches=record.fingerprint == fingerprint,
        replay_policy=replay_policy,
        awaiting_approval=record.requires_approval,
        error_code=(record.error or {}).get("code"),
        error_retryable=record.error_retryable,
        replay=replay,
    )


@cache
def count_duplicate_sql() -> str:
    """The duplicate counted on its record (by id)."""
    meta = IdempotencyRecord._meta
    column = quote(str(meta.get_field("duplicate_hits").column))
    return (
        f"UPDATE {quote(meta.db_table)} SET {column} = {column} + 1 "  # noqa: S608 - metadata
        f"WHERE {quote(str(meta.pk.column))} = %s"
    )


def start_execution(
    *,
    record: IdempotencyRecord,
    entry: LedgerEntry,
    lease_owner: str,
    actor: str,
    source: str = AuditEvent.Source.API,
    lease_seconds: int | None = None,
) -> IdempotencyRecord:
    """Start a record that waits for a human: reserved, or (a replay a human approved) unknown
    or failed without effect, using up the granted approval of ``entry``'s action in the same
    transaction (``approvals.consume``, which refuses one for another action or expired).

    Every start of a waiting record is an approved one (an automatic replay is the state
    table's, ``answer_locked``), so the approval is checked here, where the record starts, and
    not by each caller; a record that does not wait to be started
    (``IdempotencyRecord.waits_to_start``, the states of ``transitions.STARTED``) is refused
    before its approval is read."""
    with transaction.atomic():
        locked, now = lock_record(record.pk)
        deadline.check()
        if not locked.waits_to_start:
            raise InvalidTransition(_why_not_started(locked))
        # The record first, then its approval: the order every settling transition takes (it
        # locks the record, then voids open approvals), so the two cannot deadlock.
        approvals.consume(record=locked, entry=entry, actor=actor, source=source)
        begin_execution(
            transitions.STARTED,
            locked,
            lease_owner=lease_owner,
            actor=actor,
            source=source,
            now=now,
            lease_seconds=lease_seconds,
        )
    return locked


def _why_not_started(record: IdempotencyRecord) -> str:
    if record.state == RecordState.FAILED_FINAL:
        return "the action failed for good; it is never started again"
    return f"the action is {record.state}; it does not wait to be started"
