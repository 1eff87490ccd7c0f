"""The record state machine: every transition declared once, and the one executor that runs it.

A ``Transition`` names the states it may leave (its guard), the state it enters, its audit
action, whether it voids the action's open approvals, which ledger entries move with it and
to what status, and the fields it always sets. ``run`` executes any of them as one SQL
statement in the caller's transaction, on a record the caller holds locked.
``IdempotencyRecord.TRANSITIONS`` is the table these declarations make
(tests/records/test_transitions.py holds the two equal).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import StrEnum
from types import MappingProxyType
from typing import Any

from ledger.domain import TERMINAL_RECORD_STATES, EntryStatus, EscalationKind, RecordState
from ledger.errors import InvalidTransition
from ledger.models import ApprovalRequest, AuditEvent, IdempotencyRecord, LedgerEntry
from ledger.services.audit import audit_event
from ledger.services.entries import entry_change
from ledger.signals import records_became_unknown
from ledger.sql.statements import insert_parts, quote, run_precompiled, update_parts


class Outcome(StrEnum):
    """What a holder reports, or evidence finds, about an execution."""

    SUCCEEDED = "succeeded"
    FAILED = "failed"
    UNCERTAIN = "uncertain"


def _fixed(**fields: Any) -> Mapping[str, Any]:
    return MappingProxyType(fields)


@dataclass(frozen=True, slots=True)
class Transition:
    """One declared change of a record's state.

    ``entry_status``: the status the moved ledger entries take; they are the record's entries
    in status ``entries_in`` when that is set, else the one reporting entry the caller names.
    ``announce``: a record that becomes ``unknown`` this way is sent to reconciliation.
    """

    name: str
    sources: frozenset[RecordState]
    target: RecordState
    action: str
    voids_approvals: bool = False
    entry_status: EntryStatus | None = None
    entries_in: EntryStatus | None = None
    sets: Mapping[str, Any] = field(default_factory=_fixed)
    announce: bool = True


# What a new execution clears of the one before it (a new lease and token come with it).
_EXECUTION_AFRESH = _fixed(
    requires_approval=False, error=None, error_retryable=False, completed_at=None
)

#: A waiting record starts with a human's approval (``records.start_execution`` uses it up):
#: reserved, or (an approved replay) unknown or failed (``IdempotencyRecord.waits_to_start``).
STARTED = Transition(
    "started",
    IdempotencyRecord.STARTS_FROM,
    RecordState.EXECUTING,
    "record.started",
    sets=_EXECUTION_AFRESH,
)
#: A duplicate the state table lets execute again (DESIGN section 3).
REPLAYED = Transition(
    "replayed",
    frozenset({RecordState.UNKNOWN, RecordState.FAILED_FINAL}),
    RecordState.EXECUTING,
    "record.replayed",
    sets=_EXECUTION_AFRESH,
)
#: The holder went silent: its outcome is unknown, not failed, and the calls that started it
#: and never reported are uncertain with it.
LEASE_EXPIRED = Transition(
    "lease_expired",
    frozenset({RecordState.EXECUTING}),
    RecordState.UNKNOWN,
    "record.lease_expired",
    entries_in=EntryStatus.STARTED,
    entry_status=EntryStatus.UNCERTAIN,
)
#: The current holder's report (a late one, after its lease lapsed, too).
REPORTED = {
    Outcome.SUCCEEDED: Transition(
        "reported_succeeded",
        frozenset({RecordState.EXECUTING, RecordState.UNKNOWN}),
        RecordState.SUCCEEDED,
        "record.succeeded",
        voids_approvals=True,
        entry_status=EntryStatus.SUCCEEDED,
    ),
    Outcome.FAILED: Transition(
        "reported_failed",
        frozenset({RecordState.EXECUTING, RecordState.UNKNOWN}),
        RecordState.FAILED_FINAL,
        "record.failed_final",
        voids_approvals=True,
        entry_status=EntryStatus.FAILED,
    ),
    Outcome.UNCERTAIN: Transition(
        "reported_uncertain",
        frozenset({RecordState.EXECUTING}),
        RecordState.UNKNOWN,
        "record.unknown",
        entry_status=EntryStatus.UNCERTAIN,
    ),
}
#: A report that the action ran after all, once it was settled as failed without effect: a
#: human decides (no look-up), and an approval given meanwhile must not start it again.
CONTRADICTED = Transition(
    "report_contradicts_settlement",
    frozenset({RecordState.FAILED_FINAL}),
    RecordState.UNKNOWN,
    "record.report_contradicts_settlement",
    voids_approvals=True,
    entry_status=EntryStatus.UNCERTAIN,
    sets=_fixed(escalation_kind=EscalationKind.CONTRADICTED_SETTLEMENT, error_retryable=False),
    announce=False,
)
#: An unknown outcome settled from evidence; the entries waiting on it follow the record.
RESOLVED = {
    Outcome.SUCCEEDED: Transition(
        "resolved_succeeded",
        frozenset({RecordState.UNKNOWN}),
        RecordState.SUCCEEDED,
        "record.resolved_succeeded",
        voids_approvals=True,
        entries_in=EntryStatus.UNCERTAIN,
        entry_status=EntryStatus.SUCCEEDED,
        sets=_fixed(error_retryable=False),
    ),
    Outcome.FAILED: Transition(
        "resolved_failed",
        frozenset({RecordState.UNKNOWN}),
        RecordState.FAILED_FINAL,
        "record.resolved_failed_final",
        voids_approvals=True,
        entries_in=EntryStatus.UNCERTAIN,
        entry_status=EntryStatus.FAILED,
        # Known not to have happened: the same key may be used again safely.
        sets=_fixed(error_retryable=True),
    ),
}

DECLARED = (STARTED, REPLAYED, LEASE_EXPIRED, *REPORTED.values(), CONTRADICTED, *RESOLVED.values())


def entry_finished(status: EntryStatus, now: datetime) -> dict[str, Any]:
    """An entry moved to ``status`` is finished then, unless its outcome is still uncertain."""
    return {} if status is EntryStatus.UNCERTAIN else {"finished_at": now}


def snapshot(record: IdempotencyRecord) -> dict[str, Any]:
    """What a record's audit events show of it before and after."""
    return {
        "state": record.state,
        "fencing_token": record.fencing_token,
        "lease_owner": record.lease_owner,
        "executions": record.executions,
        "failed_executions": record.failed_executions,
    }


def _with_state_changes(
    record: IdempotencyRecord, to: RecordState, now: datetime, changes: dict[str, Any]
) -> dict[str, Any]:
    """``changes`` and what entering ``to`` means for the record's other fields, whichever
    transition enters it (the defaults give way to ``changes``, the rest do not)."""
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
    return changes


def run(
    transition: Transition,
    record: IdempotencyRecord,
    *,
    now: datetime,
    actor: str,
    source: str,
    detail: str = "",
    entry: LedgerEntry | None = None,
    entry_changes: Mapping[str, Any] = MappingProxyType({}),
    announce: bool = True,
    **changes: Any,
) -> None:
    """Make ``transition`` on a row-locked ``record`` (the caller holds the transaction), at
    ``now``, the database's clock read with the lock, with the other ``changes`` of this one
    occasion. ``entry``: the reporting ledger entry, moved with it (and ``entry_changes``).

    The record's UPDATE, the voiding of open approvals, the audit event and the entries' moves
    are one statement; each part runs only if the record really changed. A record that became
    unknown is announced for reconciliation, unless ``announce`` is off and the caller
    announces a whole batch at once (one look-up message per ``RECONCILE_TASK_RECORDS``)."""
    current = RecordState(record.state)
    to = transition.target
    if current not in transition.sources:
        raise InvalidTransition(f"a record cannot go from {current} to {to} ({transition.name})")
    before = snapshot(record)
    changes = _with_state_changes(record, to, now, {**transition.sets, **changes})
    after = {**before, **{k: v for k, v in changes.items() if k in before}}
    event = audit_event(
        tenant=record.tenant_id,
        actor=actor,
        action=transition.action,
        target=record,
        source=source,
        before=before,
        after=after,
        detail=detail,
    )
    moved = None
    if entry is not None:
        assert transition.entry_status is not None and transition.entries_in is None
        finished = entry_finished(transition.entry_status, now)
        moved = (entry, entry_change(entry, transition.entry_status, **finished, **entry_changes))
    _in_one_statement(transition, record, current, changes, event, moved, now)
    for name, value in changes.items():
        setattr(record, name, value)
    if moved is not None:
        for name, value in moved[1].items():
            setattr(entry, name, value)
    if to is RecordState.UNKNOWN and transition.announce and announce:
        records_became_unknown.send(sender=IdempotencyRecord, record_ids=[record.pk])


def _in_one_statement(
    transition: Transition,
    record: IdempotencyRecord,
    current: RecordState,
    changes: dict[str, Any],
    event: AuditEvent,
    moved: tuple[LedgerEntry, dict[str, Any]] | None,
    now: datetime,
) -> None:
    """The parts of ``run`` as data-modifying CTEs of one statement."""
    detail = event.detail
    sql, params = update_parts(
        IdempotencyRecord, {"pk": record.pk, "state": current.value}, changes
    )
    ctes = [f"changed AS ({sql} RETURNING 1)"]
    detail_sql: tuple[str, list[Any]] = ("%s", [detail])
    if transition.voids_approvals:
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
    if moved is not None:
        entry, entry_changes = moved
        sql, entry_params = update_parts(
            LedgerEntry, {"pk": entry.pk, "status": entry.status}, entry_changes
        )
        ctes.append(f"entry_changed AS ({sql} AND EXISTS (SELECT 1 FROM changed) RETURNING 1)")  # noqa: S608
        params += entry_params
        entry_counted = "(SELECT count(*) FROM entry_changed)"
    if transition.entries_in is not None:
        assert transition.entry_status is not None
        status = transition.entry_status
        sql, entries_params = update_parts(
            LedgerEntry,
            {"record_id": record.pk, "status": transition.entries_in.value},
            {"status": status.value, **entry_finished(status, now)},
        )
        ctes.append(f"entries_moved AS ({sql} AND EXISTS (SELECT 1 FROM changed))")  # noqa: S608
        params += entries_params
    row, _count = run_precompiled(
        f"WITH {', '.join(ctes)} SELECT (SELECT count(*) FROM changed), {entry_counted}",  # noqa: S608
        params,
    )
    if row is None or row[0] != 1:
        raise InvalidTransition(f"record {record.pk} changed state concurrently")
    if row[1] != 1:
        assert moved is not None
        raise InvalidTransition(f"ledger entry {moved[0].call_id} changed status concurrently")
