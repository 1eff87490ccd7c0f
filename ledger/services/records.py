"""The idempotency core: reserve, start, heartbeat, complete, expire, clean up.

Every state change goes through ``_transition``, which checks the allowed-transition table of
``IdempotencyRecord`` and writes the audit event in the same transaction. Reservation is a single
``INSERT ... ON CONFLICT DO NOTHING``, so it is atomic across any number of callers and web
processes. The loser is answered from the existing row: as its statement read it, when
the answer changes nothing (``answer_as_seen``), else under the row's lock.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from functools import cache, partial
from typing import Any

from django.conf import settings
from django.db import connection, transaction
from django.db.models import Model
from django.db.models.functions import Now

from ledger import deadline, shadow
from ledger.clock import db_now
from ledger.decisions import ExistingRecordAnswer, answer_existing_record
from ledger.domain import (
    FINAL_ERROR_CODES,
    POLICY_FOR,
    TERMINAL_RECORD_STATES,
    DataClassification,
    Decision,
    EntryStatus,
    ObservationCode,
    RecordState,
    ReplayPolicy,
)
from ledger.errors import (
    InvalidTransition,
    LeaseExpired,
    LedgerError,
    RecordSettled,
    ResultConflict,
    StaleFencingToken,
)
from ledger.models import (
    ApprovalRequest,
    AuditEvent,
    IdempotencyRecord,
    LedgerEntry,
    Run,
    Tenant,
    Tool,
    VersionCombination,
)
from ledger.redaction import RESULT_MAX_TEXT, redact_for_storage
from ledger.services.audit import audit, audit_event
from ledger.services.entries import entry_change, transition_entry
from ledger.services.statements import (
    DB_NOW,
    DbTime,
    fetch_joined,
    from_row,
    insert_parts,
    model_field,
    quote,
    run_precompiled,
    select_columns,
    update_parts,
)
from ledger.signals import records_became_unknown

# Another table's rows to update with a record's transition: (model, filter, changes).
Also = tuple[type[Model], dict[str, Any], dict[str, Any]]

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Reservation:
    """The outcome of ``reserve_key``: the record and what the caller should do."""

    record: IdempotencyRecord
    created: bool
    decision: Decision
    code: ObservationCode | None
    next_action: str


class Outcome(StrEnum):
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    UNCERTAIN = "uncertain"


_OUTCOME_STATE = {
    Outcome.SUCCEEDED: RecordState.SUCCEEDED,
    Outcome.FAILED: RecordState.FAILED_FINAL,
    Outcome.UNCERTAIN: RecordState.UNKNOWN,
}


_CLASS_OF_POLICY = {policy: idempotency for idempotency, policy in POLICY_FOR.items()}


def _snapshot(record: IdempotencyRecord) -> dict[str, Any]:
    return {
        "state": record.state,
        "fencing_token": record.fencing_token,
        "lease_owner": record.lease_owner,
        "executions": record.executions,
        "failed_executions": record.failed_executions,
    }


def _transition(
    record: IdempotencyRecord,
    to: RecordState,
    *,
    actor: str,
    source: str,
    action: str,
    now: datetime,
    detail: str = "",
    entry: tuple[LedgerEntry, dict[str, Any]] | None = None,
    also: Sequence[Also] = (),
    announce: bool = True,
    only_if_lapsed: bool = False,
    **changes: Any,
) -> None:
    """Move a row-locked record to ``to`` and audit it. The caller holds the transaction.
    A record that became unknown is announced for reconciliation, unless ``announce`` is off
    and the caller announces a whole batch at once (one look-up message per
    ``RECONCILE_TASK_RECORDS`` records, not one per record).

    The record UPDATE, the voiding of open approvals of a settled action, the audit event,
    (with ``entry``: the entry and its ``entry_change``) the status of the reporting ledger
    entry and the updates in ``also`` (model, non-empty filter, changes; any number of rows,
    none of them ``entry``'s) are one SQL statement: each part runs only if the record really
    changed. With ``only_if_lapsed`` the statement changes the record only if its lease has
    lapsed by the database's clock: a lapse is judged by the statement that acts on it.
    """
    current = RecordState(record.state)
    if to not in IdempotencyRecord.TRANSITIONS[current]:
        raise InvalidTransition(f"a record cannot go from {current} to {to}")
    before = _snapshot(record)
    changes["state"] = to.value
    changes["updated_at"] = now
    if to is not RecordState.EXECUTING:
        changes.setdefault("lease_owner", "")
        changes.setdefault("lease_expires_at", None)
    if to is RecordState.UNKNOWN:
        # Reconciliation starts afresh for every spell of uncertainty (unless a human is asked).
        changes.update(uncertain_since=now, next_reconcile_at=None, reconcile_attempts=0)
        changes.setdefault("escalated_at", None)
        changes.setdefault("escalation_reason", "")
    if to is RecordState.FAILED_FINAL:
        changes["failed_executions"] = record.failed_executions + 1  # known: no effect
    if to in TERMINAL_RECORD_STATES:
        changes.setdefault("completed_at", now)
        changes["expires_at"] = now + timedelta(seconds=record.ttl_seconds)
    else:
        changes["expires_at"] = None
    after = {**before, **{k: v for k, v in changes.items() if k in before}}
    event = audit_event(
        tenant=record.tenant_id,
        actor=actor,
        action=action,
        target=record,
        source=source,
        before=before,
        after=after,
    )
    _transition_in_one_statement(
        record, current, to, changes, event, detail, entry, also, only_if_lapsed
    )
    for field, value in changes.items():
        setattr(record, field, value)
    if entry is not None:
        for field, value in entry[1].items():
            setattr(entry[0], field, value)
    if to is RecordState.UNKNOWN and announce:
        records_became_unknown.send(sender=IdempotencyRecord, record_ids=[record.pk])


def _transition_in_one_statement(
    record: IdempotencyRecord,
    current: RecordState,
    to: RecordState,
    changes: dict[str, Any],
    event: AuditEvent,
    detail: str,
    entry: tuple[LedgerEntry, dict[str, Any]] | None,
    also: Sequence[Also],
    only_if_lapsed: bool,
) -> None:
    """The parts of ``_transition`` as data-modifying CTEs of one statement."""
    sql, params = update_parts(
        IdempotencyRecord, {"pk": record.pk, "state": current.value}, changes
    )
    if only_if_lapsed:
        lease = quote(str(model_field(IdempotencyRecord, "lease_expires_at").column))
        sql += f" AND {lease} <= {DB_NOW}"
    ctes = [f"changed AS ({sql} RETURNING 1)"]
    detail_sql: tuple[str, list[Any]] = ("%s", [detail])
    if to in TERMINAL_RECORD_STATES:
        # A settled action needs no approval any more: an open one must never start it again.
        sql, void_params = update_parts(
            ApprovalRequest,
            {"record_id": record.pk, "state__in": list(ApprovalRequest.OPEN_STATES)},
            {"state": ApprovalRequest.State.INVALIDATED},
        )
        ctes.append(f"voided AS ({sql} AND EXISTS (SELECT 1 FROM changed) RETURNING 1)")  # noqa: S608
        params += void_params
        detail_sql = (
            "CASE WHEN (SELECT count(*) FROM voided) = 0 THEN %s ELSE ltrim(%s || ' (' || "
            "(SELECT count(*) FROM voided) || ' open approval(s) invalidated)') END",
            [detail, detail],
        )
    columns, values, audit_params = insert_parts(event, expressions={"detail": detail_sql})
    ctes.append(
        f"audited AS (INSERT INTO {quote(AuditEvent._meta.db_table)} ({columns}) "  # noqa: S608
        f"SELECT {values} FROM changed)"
    )
    params += audit_params
    entry_counted = "1"
    if entry is not None:
        ledger_entry, entry_changes = entry
        sql, entry_params = update_parts(
            LedgerEntry, {"pk": ledger_entry.pk, "status": ledger_entry.status}, entry_changes
        )
        ctes.append(f"entry_changed AS ({sql} AND EXISTS (SELECT 1 FROM changed) RETURNING 1)")  # noqa: S608
        params += entry_params
        entry_counted = "(SELECT count(*) FROM entry_changed)"
    for n, (model, where, model_changes) in enumerate(also):
        assert where, "an update with a transition needs a filter"
        sql, also_params = update_parts(model, where, model_changes)
        ctes.append(f"also{n} AS ({sql} AND EXISTS (SELECT 1 FROM changed))")  # noqa: S608
        params += also_params
    row, _count = run_precompiled(
        f"WITH {', '.join(ctes)} SELECT (SELECT count(*) FROM changed), {entry_counted}",  # noqa: S608
        params,
    )
    if row is None or row[0] != 1:
        raise InvalidTransition(f"record {record.pk} changed state concurrently")
    if row[1] != 1:
        assert entry is not None
        raise InvalidTransition(f"ledger entry {entry[0].call_id} changed status concurrently")


def _lease_until(now: datetime, lease_seconds: int | None) -> datetime:
    """The end of a lease granted at ``now`` (the database's clock, read with the record)."""
    return now + timedelta(seconds=lease_seconds or settings.LEDGER_LEASE_SECONDS)


def lease_seconds_granted(lease_seconds: int | None = None) -> int:
    """How long a lease lasts: what a runtime paces its heartbeats by, on its own clock."""
    return lease_seconds or settings.LEDGER_LEASE_SECONDS


@dataclass(frozen=True, slots=True)
class FirstCall:
    """What ``reserve_new_key`` did: the record it created, or else the key's record as its
    statement read it (unlocked; None when there was none it could see) and whether, by the
    database's clock in that statement, its lease had lapsed."""

    created: IdempotencyRecord | None
    seen: IdempotencyRecord | None
    seen_lapsed: bool = False


def reserve_new_key(
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
) -> FirstCall:
    """The hot path's common case in one statement: take ``key`` for the first time, executing
    at once, with its audit event and ``entry`` (the ledger entry of the call, unsaved; it is
    saved pointing at the record). One statement is atomic by itself, so no transaction is
    opened (no ``BEGIN``/``COMMIT`` round trips).

    When the key is already taken it writes nothing, and the same statement reads the key's
    record (unlocked): a duplicate can often be answered from it (``answer_as_seen``). Else
    the caller goes the general way (``reserve_key`` in a transaction, told the key is
    ``taken``), which answers from the locked record."""
    deadline.check()
    record, event = _new_record(
        tenant=tenant,
        tool=tool,
        key=key,
        fingerprint=fingerprint,
        replay_policy=replay_policy,
        lease_owner=lease_owner,
        actor=actor,
        source=AuditEvent.Source.API,
        run=run,
        combination=run.combination,
    )
    entry.fencing_token = record.fencing_token
    return _insert_if_absent(record, event, entry=entry)


def _insert_if_absent(
    record: IdempotencyRecord, event: AuditEvent, *, entry: LedgerEntry | None = None
) -> FirstCall:
    """INSERT the record unless its (tenant, key) exists, and its audit ``event`` with it (one
    statement: the event is written only if the record was), its lease ending by the
    database's clock. With ``entry`` (the ledger entry, written too, pointing at the new
    record) when the key was taken, the statement also reads the key's record (None when it was
    committed after the statement began, too late for its snapshot) and judges its lease by
    the database's clock."""
    columns, values, params = insert_parts(record)
    audit_columns, audit_values, audit_params = insert_parts(
        event, expressions={"target_id": ("inserted.id::text", [])}
    )
    # Identifiers come from the models' metadata, values are parameters: nothing from input.
    sql = (
        f"WITH inserted AS (INSERT INTO {quote(IdempotencyRecord._meta.db_table)} ({columns}) "  # noqa: S608
        f"VALUES ({values}) ON CONFLICT ({quote('tenant_id')}, {quote('key')}) DO NOTHING "
        f"RETURNING {quote('id')}, {quote('lease_expires_at')}), "
        f"audited AS (INSERT INTO {quote(AuditEvent._meta.db_table)} ({audit_columns}) "
        f"SELECT {audit_values} FROM inserted) "
    )
    params += audit_params
    if entry is None:
        sql += "SELECT id, lease_expires_at FROM inserted"
    else:
        entry_columns, entry_values, entry_params = insert_parts(
            entry, expressions={"record_id": ("inserted.id", [])}
        )
        # The key's record is read only when nothing was inserted (a one-time filter), in the
        # statement's snapshot: the inserting CTE's own row is not visible to it.
        sql += (
            f", entered AS (INSERT INTO {quote(LedgerEntry._meta.db_table)} ({entry_columns}) "  # noqa: S608
            f"SELECT {entry_values} FROM inserted RETURNING id) "
            "SELECT (SELECT id FROM inserted), (SELECT lease_expires_at FROM inserted), "
            f"(SELECT id FROM entered), {_LAPSED_SQL.format(r='r')}, "
            f"{select_columns(IdempotencyRecord, 'r')} FROM (SELECT 1) AS one "
            f"LEFT JOIN {quote(IdempotencyRecord._meta.db_table)} r "
            "ON NOT EXISTS (SELECT 1 FROM inserted) AND r.tenant_id = %s AND r.key = %s"
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


# Whether record ``{r}``'s lease has lapsed by the database's clock: a lapse is judged by
# PostgreSQL, never by a process's clock.
_LAPSED_SQL = (
    "({r}.state = 'executing' AND {r}.lease_expires_at IS NOT NULL "
    f"AND {{r}}.lease_expires_at <= {DB_NOW})"
)


def _new_record(
    *,
    tenant: Tenant,
    tool: Tool,
    key: str,
    fingerprint: str,
    replay_policy: ReplayPolicy,
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
        action="record.reserved" if requires_approval else "record.started",
        target=("idempotencyrecord", ""),  # the id is the inserted one (see _insert_if_absent)
        source=source,
        after=_snapshot(record),
    )
    return record, event


def reserve_key(
    *,
    tenant: Tenant,
    tool: Tool,
    key: str,
    fingerprint: str,
    replay_policy: ReplayPolicy,
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
    the action needs an approval first. An existing key is answered by the state table of
    DESIGN section 3; it is never executed a second time unless the replay decision allows it.
    ``taken``: the caller has just seen the key taken (``reserve_new_key`` wrote nothing), so
    the existing record is locked first, and a new one is inserted only if it has gone since
    (expired and cleaned up in between).
    """
    # No savepoint of its own: inside a caller's transaction (the API's) an error here rolls
    # the whole call back anyway, and alone it is a transaction of its own.
    with transaction.atomic(savepoint=False):
        existing = _lock_by_key(tenant.pk, key) if taken else None
        deadline.check()  # after the wait for the lock: the caller may have given up by now
        if existing is None:
            record, event = _new_record(
                tenant=tenant,
                tool=tool,
                key=key,
                fingerprint=fingerprint,
                replay_policy=replay_policy,
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
            existing = _lock_by_key(tenant.pk, key)
            if existing is None:
                raise IdempotencyRecord.DoesNotExist(f"key {key!r} was taken, then not found")
        record, now = existing
        return _answer_existing(
            record,
            fingerprint=fingerprint,
            replay_policy=replay_policy,
            lease_owner=lease_owner,
            lease_seconds=lease_seconds,
            actor=actor,
            source=source,
            now=now,
        )


def _lock_by_key(tenant_id: int, key: str) -> Locked | None:
    """The record of ``key``, locked, with the database's clock: for a duplicate whose answer
    needs the lock, or whose record changed after the one-statement way read it."""
    return _locked_record("tenant_id = %s AND key = %s", [tenant_id, key])


def _answer_existing(
    existing: IdempotencyRecord,
    *,
    fingerprint: str,
    replay_policy: ReplayPolicy,
    lease_owner: str,
    lease_seconds: int | None,
    actor: str,
    source: str,
    now: datetime,
) -> Reservation:
    """The answer from a key's locked record (DESIGN section 3)."""
    if _lease_lapsed(existing, now):
        # The holder went silent: its outcome is unknown now, not failed (DESIGN section 3).
        _transition(
            existing,
            RecordState.UNKNOWN,
            actor="system",
            source=source,
            action="record.lease_expired",
            now=now,
            only_if_lapsed=True,
            also=[_entries_now_uncertain(existing)],
        )
    answer = _state_table_answer(existing, fingerprint, replay_policy)
    if answer.reexecute:
        _begin_execution(
            existing,
            lease_owner=lease_owner,
            actor=actor,
            source=source,
            action="record.replayed",
            now=now,
            lease_seconds=lease_seconds,
        )
        return Reservation(existing, False, Decision.EXECUTE, None, "execute")
    if answer.decision is Decision.CONFLICT:
        audit(
            tenant=existing.tenant_id,
            actor=actor,
            action="record.key_conflict",
            target=existing,
            source=source,
            outcome=AuditEvent.Outcome.DENIED,
            detail="Same idempotency key with a different request fingerprint.",
        )
    else:
        run_precompiled(_count_duplicate_sql(), [existing.pk])
        existing.duplicate_hits += 1
    return Reservation(existing, False, answer.decision, answer.code, answer.next_action)


def _entries_now_uncertain(record: IdempotencyRecord) -> Also:
    """A lapsed lease: the entries that started the action and never reported are uncertain
    now, as their record is."""
    return (
        LedgerEntry,
        {"record_id": record.pk, "status": EntryStatus.STARTED.value},
        {"status": EntryStatus.UNCERTAIN.value},
    )


def _lease_lapsed(record: IdempotencyRecord, now: datetime) -> bool:
    """An executing record whose holder went silent by ``now`` (the database's clock, read
    with the locked record): its outcome is unknown now."""
    lease = record.lease_expires_at
    return record.state == RecordState.EXECUTING and lease is not None and lease <= now


def _state_table_answer(
    record: IdempotencyRecord, fingerprint: str, replay_policy: ReplayPolicy
) -> ExistingRecordAnswer:
    return answer_existing_record(
        state=RecordState(record.state),
        fingerprint_matches=record.fingerprint == fingerprint,
        replay_policy=replay_policy,
        awaiting_approval=record.requires_approval,
        error_code=(record.error or {}).get("code"),
        error_retryable=record.error_retryable,
    )


# The answers a duplicate may be given from its record as read without the lock: neither
# starts an execution nor changes the record (``answer_as_seen``).
_ANSWERED_AS_SEEN = frozenset({Decision.WAIT, Decision.RECORDED_RESULT})
# What the state table's answer depends on: the record must still have these values when the
# duplicate is counted (``count_duplicate_as_seen``). State and fencing token alone would do:
# every transition changes the state, except a replay, which takes a new fencing token, and a
# token settles once, so the result, the error and its code cannot change without one of them.
# The lease also moves with heartbeats; the others are cheap insurance. The fingerprint never
# changes.
_ANSWER_DEPENDS_ON = (
    "state",
    "fencing_token",
    "lease_expires_at",
    "requires_approval",
    "error_retryable",
    "completed_at",
)


def answer_as_seen(
    seen: IdempotencyRecord, *, fingerprint: str, replay_policy: ReplayPolicy, lapsed: bool
) -> Reservation | None:
    """The answer to a duplicate from its record as read without the lock (``reserve_new_key``
    read it), when that answer neither starts an execution nor changes the record: ``wait``
    or ``recorded_result`` (DESIGN section 3), the whole of a retry storm. None for every
    other answer (an execution to grant, a lease gone silent, a conflict to audit, an approval
    to ask for): those are given under the record's lock by ``reserve_key``. The answer holds
    only if the record has not changed since: ``count_duplicate_as_seen`` checks that.
    ``lapsed``: whether the statement that read it found its lease lapsed (the database's
    clock)."""
    if lapsed:
        return None  # the holder went silent: the locked way marks the record unknown
    answer = _state_table_answer(seen, fingerprint, replay_policy)
    if answer.reexecute or answer.decision not in _ANSWERED_AS_SEEN:
        return None
    return Reservation(seen, False, answer.decision, answer.code, answer.next_action)


def count_duplicate_as_seen(seen: IdempotencyRecord, entry: LedgerEntry) -> bool:
    """Count a duplicate of ``seen`` and write its ``entry`` (unsaved) in one statement, only
    if the record still has every value its answer depends on (``_ANSWER_DEPENDS_ON``): the
    ``UPDATE`` re-checks them on the row it locks, so the answer given is the state table's
    answer at that moment, as under ``reserve_key``'s lock. False, writing nothing, when the
    record has changed or gone since it was read, or when its lease has lapsed by now (the
    locked way would mark it unknown): the locked way answers then."""
    entry_columns, entry_values, entry_params = insert_parts(
        entry, expressions={"record_id": ("counted.id", [])}
    )
    params = [IdempotencyRecord._meta.pk.get_db_prep_value(seen.pk, connection)]
    for name in _ANSWER_DEPENDS_ON:
        field = model_field(IdempotencyRecord, name)
        params.append(field.get_db_prep_value(getattr(seen, field.attname), connection))
    params.append(RecordState.EXECUTING.value)
    # Identifiers come from the models' metadata, values are parameters: nothing from input.
    sql = (
        f"WITH counted AS ({_count_duplicate_as_seen_sql()}) "  # noqa: S608
        f"INSERT INTO {quote(LedgerEntry._meta.db_table)} ({entry_columns}) "
        f"SELECT {entry_values} FROM counted RETURNING id"
    )
    row, _count = run_precompiled(sql, [*params, *entry_params])
    if row is None:
        return False
    entry.pk = row[0]
    entry._state.adding = False
    seen.duplicate_hits += 1
    return True


@cache
def _count_duplicate_as_seen_sql() -> str:
    """``_count_duplicate_sql``, only while the record is as seen and its lease has not lapsed."""

    def column(name: str) -> str:
        return quote(str(model_field(IdempotencyRecord, name).column))

    unchanged = " AND ".join(f"{column(n)} IS NOT DISTINCT FROM %s" for n in _ANSWER_DEPENDS_ON)
    state, lease = column("state"), column("lease_expires_at")
    return (
        f"{_count_duplicate_sql()} AND {unchanged} "
        f"AND NOT ({state} = %s AND {lease} IS NOT NULL AND {lease} <= {DB_NOW}) "
        f"RETURNING {column('pk')} AS id"
    )


@cache
def _count_duplicate_sql() -> str:
    meta = IdempotencyRecord._meta
    column = quote(str(meta.get_field("duplicate_hits").column))
    return (
        f"UPDATE {quote(meta.db_table)} SET {column} = {column} + 1 "  # noqa: S608 - metadata
        f"WHERE {quote(str(meta.pk.column))} = %s"
    )


def _begin_execution(
    record: IdempotencyRecord,
    *,
    lease_owner: str,
    actor: str,
    source: str,
    action: str,
    now: datetime,
    lease_seconds: int | None,
) -> None:
    """Hand a locked record to a new executor: a new lease and the next fencing token."""
    _transition(
        record,
        RecordState.EXECUTING,
        actor=actor,
        source=source,
        action=action,
        now=now,
        lease_owner=lease_owner,
        lease_expires_at=_lease_until(now, lease_seconds),
        fencing_token=record.fencing_token + 1,
        executions=record.executions + 1,
        requires_approval=False,
        error=None,
        error_retryable=False,
        completed_at=None,
    )


def start_execution(
    *,
    record: IdempotencyRecord,
    lease_owner: str,
    actor: str,
    source: str = AuditEvent.Source.API,
    lease_seconds: int | None = None,
    approved: bool = False,
) -> IdempotencyRecord:
    """Start a record that was waiting: reserved, or (after an approved replay) unknown or
    failed. Without ``approved`` only a reserved record that needs no approval may start.
    """
    with transaction.atomic():
        locked, now = lock_record(record.pk)
        deadline.check()
        if not approved and (locked.requires_approval or locked.state != RecordState.RESERVED):
            raise InvalidTransition(f"the {locked.state} record needs an approval to start")
        final_code = (locked.error or {}).get("code") in FINAL_ERROR_CODES
        if locked.state == RecordState.FAILED_FINAL and (not locked.error_retryable or final_code):
            raise InvalidTransition("the action failed for good; it is never started again")
        _begin_execution(
            locked,
            lease_owner=lease_owner,
            actor=actor,
            source=source,
            action="record.started",
            now=now,
            lease_seconds=lease_seconds,
        )
    return locked


def heartbeat(
    *, record: IdempotencyRecord, fencing_token: int, lease_seconds: int | None = None
) -> datetime:
    """Extend the lease of an executing record held with ``fencing_token``, unless it has
    lapsed: both judged, and the new end set, by the database's clock in one statement."""
    seconds = lease_seconds_granted(lease_seconds)
    row, _count = run_precompiled(
        _heartbeat_sql(),
        [float(seconds), record.pk, RecordState.EXECUTING.value, fencing_token],
    )
    if row is not None:
        return row[0]
    current = IdempotencyRecord.objects.get(pk=record.pk)
    if current.fencing_token != fencing_token:
        raise StaleFencingToken("another caller holds this record now")
    if current.state == RecordState.EXECUTING or current.state == RecordState.UNKNOWN:
        raise LeaseExpired("the lease lapsed; the outcome is unknown and will be reconciled")
    raise InvalidTransition(f"the record is {current.state}; there is no lease to extend")


@cache
def _heartbeat_sql() -> str:
    def column(name: str) -> str:
        return quote(str(model_field(IdempotencyRecord, name).column))

    lease = column("lease_expires_at")
    return (
        f"UPDATE {quote(IdempotencyRecord._meta.db_table)} "  # noqa: S608 - from metadata
        f"SET {lease} = {DB_NOW} + make_interval(secs => %s::float8), "
        f"{column('updated_at')} = {DB_NOW} "
        f"WHERE {column('pk')} = %s AND {column('state')} = %s "
        f"AND {column('fencing_token')} = %s AND {lease} > {DB_NOW} RETURNING {lease}"
    )


class CompletionRefused(Exception):
    """A completion report that must be refused: a stale token, or a record already settled
    otherwise. Raised before anything is written; ``refuse_completion`` audits it."""

    def __init__(
        self,
        record: IdempotencyRecord,
        *,
        reason: str,
        fencing_token: int,
        outcome: Outcome,
        actor: str,
        source: str,
    ) -> None:
        super().__init__(reason)
        self.record = record
        self.reason = reason
        self.fencing_token = fencing_token
        self.outcome = outcome
        self.actor = actor
        self.source = source


def refuse_completion(refused: CompletionRefused) -> LedgerError:
    """Audit a refused report (call it outside the failed transaction, so the event outlives
    the error) and return the error to raise."""
    record = refused.record
    audit(
        tenant=record.tenant_id,
        actor=refused.actor,
        action="record.complete_refused",
        target=record,
        source=refused.source,
        outcome=AuditEvent.Outcome.DENIED,
        detail=f"token {refused.fencing_token} reported {refused.outcome.value}; record is "
        f"{record.state} with token {record.fencing_token}",
    )
    if refused.reason == REFUSED_STALE:
        return StaleFencingToken(
            f"fencing token {refused.fencing_token} is stale (current is {record.fencing_token})"
        )
    if refused.reason == REFUSED_DIFFERENT_RESULT:
        return ResultConflict(
            "this call's result was already recorded, and the report differs from it; the "
            "recorded result stands"
        )
    return RecordSettled(
        f"the outcome was already found: the record is {record.state}; the report changes nothing"
    )


def complete_execution(
    *,
    record: IdempotencyRecord,
    fencing_token: int,
    outcome: Outcome,
    actor: str,
    source: str = AuditEvent.Source.API,
    result: Any = None,
    error: dict[str, Any] | None = None,
    retryable: bool = False,
    data_classification: DataClassification = DataClassification.INTERNAL,
    entry: LedgerEntry | None = None,
    evidence: Any = None,
) -> IdempotencyRecord:
    """Record the outcome reported by the holder of ``fencing_token``.

    When ``entry`` (the ledger entry of the reporting call) is given, its status changes in
    the same transaction.

    A late report for a record whose lease lapsed (now ``unknown``) is accepted when the token is
    still current: it is the best evidence there is. A report with an older token is refused and
    the refusal is audited.
    """
    try:
        with transaction.atomic():
            locked, now = lock_record(record.pk)
            return complete_locked(
                locked,
                now=now,
                fencing_token=fencing_token,
                outcome=outcome,
                actor=actor,
                source=source,
                result=result,
                error=error,
                retryable=retryable,
                data_classification=data_classification,
                entry=entry,
                evidence=evidence,
            )
    except CompletionRefused as refused:
        raise refuse_completion(refused) from None


def complete_locked(
    locked: IdempotencyRecord,
    *,
    now: datetime,
    fencing_token: int,
    outcome: Outcome,
    actor: str,
    source: str = AuditEvent.Source.API,
    result: Any = None,
    error: dict[str, Any] | None = None,
    retryable: bool = False,
    data_classification: DataClassification = DataClassification.INTERNAL,
    entry: LedgerEntry | None = None,
    evidence: Any = None,
) -> IdempotencyRecord:
    """``complete_execution`` for a caller that already holds ``locked`` (read ``SELECT ...
    FOR UPDATE`` in its open transaction, with ``now``, the database's clock after the lock).
    Raises ``CompletionRefused`` without writing."""
    target = _OUTCOME_STATE[outcome]
    refused = partial(
        CompletionRefused,
        locked,
        fencing_token=fencing_token,
        outcome=outcome,
        actor=actor,
        source=source,
    )
    if locked.fencing_token != fencing_token:
        raise refused(reason=REFUSED_STALE)
    stored = (
        redact_for_storage(result, data_classification, limit=RESULT_MAX_TEXT)
        if target is RecordState.SUCCEEDED
        else None
    )
    if locked.state == target.value:
        if target is RecordState.SUCCEEDED and not _same_json(stored, locked.result):
            if _succeeded_by_report(locked):
                # One token, two different results: two holders, the case fencing exists for.
                raise refused(reason=REFUSED_DIFFERENT_RESULT)
            raise refused(reason=REFUSED_SETTLED)  # a look-up or a human found it first
        # The same report again (a retry after a lost response): nothing new to record.
        if entry is not None and entry.status != _ENTRY_STATUS[outcome]:
            _finish_entry(entry, outcome, now, evidence, data_classification)
        return locked
    if locked.state == RecordState.FAILED_FINAL and target is not RecordState.FAILED_FINAL:
        _contradicted(locked, outcome, now=now, actor=actor, source=source, entry=entry)
        return locked
    if _already_contradicted(locked, outcome):
        return locked  # the same report again: a human has both facts already
    if locked.state not in (RecordState.EXECUTING, RecordState.UNKNOWN):
        raise refused(reason=REFUSED_SETTLED)
    _transition(
        locked,
        target,
        actor=actor,
        source=source,
        action=f"record.{target.value}",
        now=now,
        entry=(entry, _entry_changes(entry, outcome, now, evidence, data_classification))
        if entry is not None
        else None,
        result=stored,
        error=redact_for_storage(error, data_classification) if error else None,
        error_retryable=retryable and target is RecordState.FAILED_FINAL,
    )
    return locked


def _same_json(reported: Any, recorded: Any) -> bool:
    """Whether two results are the same JSON as PostgreSQL stores it (``1e23`` is the number
    ``100000000000000000000000`` once stored): compared as jsonb only when Python's equality
    says they differ."""
    if reported == recorded:
        return True
    with connection.cursor() as cursor:
        cursor.execute("SELECT %s::jsonb = %s::jsonb", [json.dumps(reported), json.dumps(recorded)])
        row = cursor.fetchone()
    return bool(row and row[0])


def _succeeded_by_report(record: IdempotencyRecord) -> bool:
    """Whether the record's success was recorded from its holder's report (not from a
    look-up or a human's resolution): its last state change in the audit log says."""
    last = (
        AuditEvent.objects.filter(
            target_type="idempotencyrecord", target_id=str(record.pk), action__startswith="record."
        )
        .exclude(outcome=AuditEvent.Outcome.DENIED)
        .order_by("-pk")
        .values_list("action", flat=True)
        .first()
    )
    return last == "record.succeeded"


CONTRADICTION_ESCALATION = (
    "The ledger had settled this action as failed with no effect (so a retry was safe), then "
    "its executor, holding the current fencing token, reported {outcome}: the tool ran after "
    "all. Check the downstream for a duplicate before anyone retries."
)


def _already_contradicted(record: IdempotencyRecord, outcome: Outcome) -> bool:
    return (
        record.state == RecordState.UNKNOWN
        and record.escalated_at is not None
        and record.escalation_reason == CONTRADICTION_ESCALATION.format(outcome=outcome.value)
    )


def _contradicted(
    locked: IdempotencyRecord,
    outcome: Outcome,
    *,
    now: datetime,
    actor: str,
    source: str,
    entry: LedgerEntry | None,
) -> None:
    """A report that contradicts a settled failure: the action was known not to have happened
    (a look-up found nothing, or a human said so), and the current holder now says it ran, or
    may have. Neither fact wins: the record becomes ``unknown``, is no longer safe to retry,
    and goes to a human with both facts; the model is told the side effect is uncertain."""
    reason = CONTRADICTION_ESCALATION.format(outcome=outcome.value)
    _transition(
        locked,
        RecordState.UNKNOWN,
        actor=actor,
        source=source,
        action="record.report_contradicts_settlement",
        now=now,
        detail=f"was failed_final ({(locked.error or {}).get('code', 'FAILED')}); {reason}",
        entry=(
            entry,
            _entry_changes(entry, Outcome.UNCERTAIN, now, None, DataClassification.INTERNAL),
        )
        if entry is not None
        and EntryStatus.UNCERTAIN in LedgerEntry.TRANSITIONS[EntryStatus(entry.status)]
        else None,
        announce=False,  # a human decides: no automatic look-up
        # An approval given while the action was thought not to have run must not start it.
        also=[
            (
                ApprovalRequest,
                {"record_id": locked.pk, "state__in": list(ApprovalRequest.OPEN_STATES)},
                {"state": ApprovalRequest.State.INVALIDATED},
            )
        ],
        escalated_at=now,
        escalation_reason=reason,
        error_retryable=False,
    )


# Why a completion report is refused.
REFUSED_STALE = "stale"
REFUSED_SETTLED = "settled"
REFUSED_DIFFERENT_RESULT = "different_result"


def resolve_unknown(
    *,
    record: IdempotencyRecord,
    outcome: Outcome,
    actor: str,
    source: str = AuditEvent.Source.API,
    result: Any = None,
    error: dict[str, Any] | None = None,
    detail: str,
) -> IdempotencyRecord:
    """Settle an ``unknown`` record from evidence (a downstream look-up, a file hash, a human):
    ``succeeded`` with the evidence as its result, or ``failed_final`` (it did not happen).
    """
    if outcome is Outcome.UNCERTAIN:
        raise InvalidTransition("resolving needs a known outcome")
    with transaction.atomic():
        locked, now = lock_record(record.pk)
        resolve_locked(
            locked,
            now=now,
            outcome=outcome,
            actor=actor,
            source=source,
            result=result,
            error=error,
            detail=detail,
        )
    return locked


# A record locked by this transaction, and the database's clock once the lock is held: every
# time a transition under the lock decides by or writes (DESIGN section 3, one clock).
Locked = tuple[IdempotencyRecord, datetime]


def lock_record(pk: int) -> Locked:
    """The record, read ``SELECT ... FOR UPDATE`` in the caller's transaction, and the
    database's clock after the lock (reconciliation takes this lock for every look-up)."""
    locked = _locked_record("id = %s", [pk])
    if locked is None:
        raise IdempotencyRecord.DoesNotExist(f"no record {pk}")
    return locked


def _locked_record(where: str, params: list[Any]) -> Locked | None:
    """The record matching ``where`` (fixed SQL over its columns, values in ``params``), read
    ``SELECT ... FOR UPDATE`` with a precompiled statement, and the database's clock once the
    lock is held; None when there is none."""
    found = fetch_joined(_locked_record_sql(where), params, (IdempotencyRecord,), trailing=1)
    if found is None:
        return None
    record, now = found
    assert isinstance(record, IdempotencyRecord)
    return record, now


@cache
def _locked_record_sql(where: str) -> str:
    # The clock is read by the outer query, on the row the inner one returns once locked: after
    # any wait for the lock, not before it.
    return (
        f"SELECT {select_columns(IdempotencyRecord, 'r')}, clock_timestamp() "  # noqa: S608
        f"FROM (SELECT * FROM {quote(IdempotencyRecord._meta.db_table)} WHERE {where} "
        "FOR UPDATE) r"
    )


def resolve_locked(
    locked: IdempotencyRecord,
    *,
    now: datetime,
    outcome: Outcome,
    actor: str,
    source: str,
    result: Any = None,
    error: dict[str, Any] | None = None,
    detail: str,
    record_changes: dict[str, Any] | None = None,
) -> None:
    """``resolve_unknown`` for a caller that already holds ``locked`` (read ``SELECT ... FOR
    UPDATE`` in its open transaction, with ``now``, the database's clock after the lock), such
    as a reconciliation worker; ``record_changes``
    (other columns of the record, such as its look-up count) are written with it."""
    if outcome is Outcome.UNCERTAIN:
        raise InvalidTransition("resolving needs a known outcome")
    if locked.state != RecordState.UNKNOWN:
        raise InvalidTransition(f"only an unknown record can be resolved; it is {locked.state}")
    target = _OUTCOME_STATE[outcome]
    _transition(
        locked,
        target,
        actor=actor,
        source=source,
        action=f"record.resolved_{target.value}",
        now=now,
        detail=detail,
        result=redact_for_storage(result, DataClassification.INTERNAL)
        if target is RecordState.SUCCEEDED
        else None,
        error=redact_for_storage(error, DataClassification.INTERNAL) if error else None,
        # Known not to have happened: the same key may be used again safely.
        error_retryable=target is RecordState.FAILED_FINAL,
        # The entries waiting on the outcome follow the record: those that reported uncertain,
        # and those whose report never arrived (made uncertain when their lease lapsed).
        also=[
            (
                LedgerEntry,
                {"record_id": locked.pk, "status": EntryStatus.UNCERTAIN},
                {"status": _ENTRY_STATUS[outcome], "finished_at": now},
            )
        ],
        **(record_changes or {}),
    )


_ENTRY_STATUS = {
    Outcome.SUCCEEDED: EntryStatus.SUCCEEDED,
    Outcome.FAILED: EntryStatus.FAILED,
    Outcome.UNCERTAIN: EntryStatus.UNCERTAIN,
}


def _entry_changes(
    entry: LedgerEntry,
    outcome: Outcome,
    now: datetime,
    evidence: Any,
    data_classification: DataClassification,
) -> dict[str, Any]:
    target = _ENTRY_STATUS[outcome]
    changes: dict[str, Any] = {}
    if target is not EntryStatus.UNCERTAIN:
        changes["finished_at"] = now
    if evidence is not None:
        changes["side_effects"] = [{"evidence": redact_for_storage(evidence, data_classification)}]
    return entry_change(entry, target, **changes)


def _finish_entry(
    entry: LedgerEntry,
    outcome: Outcome,
    now: datetime,
    evidence: Any,
    data_classification: DataClassification,
) -> None:
    changes = _entry_changes(entry, outcome, now, evidence, data_classification)
    transition_entry(entry, EntryStatus(changes.pop("status")), **changes)


def expire_leases(*, batch_size: int = 500) -> list[int]:
    """Executing records whose lease lapsed become ``unknown`` (never ``reserved``).

    Rows locked by another sweeper or a completing caller are skipped, so several workers can
    sweep at once. The batch is announced for reconciliation together, once it commits; returns
    the ids that became unknown.
    """
    expired: list[int] = []
    with transaction.atomic():
        batch = list(
            IdempotencyRecord.objects.select_for_update(skip_locked=True)
            .filter(state=RecordState.EXECUTING, lease_expires_at__lte=Now())
            .order_by("lease_expires_at")[:batch_size]
        )
        now = db_now()
        for record in batch:
            _transition(
                record,
                RecordState.UNKNOWN,
                actor="system",
                source="worker",
                action="record.lease_expired",
                now=now,
                announce=False,
                only_if_lapsed=True,
                also=[_entries_now_uncertain(record)],
            )
            expired.append(record.pk)
        if expired:
            records_became_unknown.send(sender=IdempotencyRecord, record_ids=expired)
    if expired:
        logger.info("lease sweep", extra={"expired": len(expired)})
    return expired
