"""A record's lease: granted with an execution, extended by heartbeats, and lapsed when its
holder goes silent, which makes the record ``unknown``, never ``reserved`` (DESIGN section 3).

Whether a lease has lapsed is decided in one place, ``lapsed_sql``, by PostgreSQL's clock:
every statement that acts on a lapse (the reservation's read, the locked read, the count of a
duplicate as seen, a heartbeat, the sweep) writes it from there.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta
from functools import cache

from django.conf import settings
from django.db import transaction
from django.db.models import BooleanField
from django.db.models.expressions import RawSQL

from ledger.clock import db_now
from ledger.domain import RecordState
from ledger.errors import InvalidTransition, LeaseExpired, StaleFencingToken
from ledger.models import IdempotencyRecord
from ledger.records import transitions
from ledger.signals import records_became_unknown
from ledger.sql.statements import DB_NOW, model_field, quote, run_precompiled

logger = logging.getLogger(__name__)


def _column(name: str) -> str:
    return quote(str(model_field(IdempotencyRecord, name).column))


@cache
def lapsed_sql(row: str, now: str = DB_NOW) -> str:
    """Whether the lease of the record row named ``row`` (an alias or the quoted table) has
    lapsed by the database's clock ``now`` (an SQL expression): an executing record whose
    lease ended at or before it. The one definition of a lapse: never a process's clock."""
    state, lease = f"{row}.{_column('state')}", f"{row}.{_column('lease_expires_at')}"
    return (
        f"({state} = '{RecordState.EXECUTING.value}' AND {lease} IS NOT NULL AND {lease} <= {now})"
    )


def lease_seconds_granted(lease_seconds: int | None = None) -> int:
    """How long a lease lasts: what a runtime paces its heartbeats by, on its own clock."""
    return lease_seconds or settings.LEDGER_LEASE_SECONDS


def begin_execution(
    transition: transitions.Transition,
    record: IdempotencyRecord,
    *,
    lease_owner: str,
    actor: str,
    source: str,
    now: datetime,
    lease_seconds: int | None,
) -> None:
    """Hand a locked record to a new executor (``transition`` starts or replays it): a new
    lease from ``now``, the database's clock read with the lock, and the next fencing token."""
    transitions.run(
        transition,
        record,
        now=now,
        actor=actor,
        source=source,
        lease_owner=lease_owner,
        lease_expires_at=now + timedelta(seconds=lease_seconds_granted(lease_seconds)),
        fencing_token=record.fencing_token + 1,
        executions=record.executions + 1,
    )


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
    # Refused without an audit event, unlike a report (``records.complete``): a heartbeat
    # changes no state, so neither does its refusal, and a holder that lost its lease may
    # heartbeat every third of a lease until it hears so. What DESIGN section 3 refuses and
    # audits is its completion, the report that would change the record.
    if current.fencing_token != fencing_token:
        raise StaleFencingToken("another caller holds this record now")
    if current.state == RecordState.EXECUTING or current.state == RecordState.UNKNOWN:
        raise LeaseExpired("the lease lapsed; the outcome is unknown and will be reconciled")
    raise InvalidTransition(f"the record is {current.state}; there is no lease to extend")


@cache
def _heartbeat_sql() -> str:
    table = quote(IdempotencyRecord._meta.db_table)
    lease = _column("lease_expires_at")
    return (
        f"UPDATE {table} "  # noqa: S608 - from metadata
        f"SET {lease} = {DB_NOW} + make_interval(secs => %s::float8), "
        f"{_column('updated_at')} = {DB_NOW} "
        f"WHERE {_column('pk')} = %s AND {_column('state')} = %s "
        f"AND {_column('fencing_token')} = %s AND NOT {lapsed_sql(table)} RETURNING {lease}"
    )


def expire_lapsed(
    locked: IdempotencyRecord, *, now: datetime, source: str, announce: bool = True
) -> None:
    """``locked``, read with its lease lapsed under the lock (which no heartbeat gets past),
    becomes ``unknown`` at ``now``, the database's clock read with it."""
    transitions.run(
        transitions.LEASE_EXPIRED,
        locked,
        now=now,
        actor="system",
        source=source,
        announce=announce,
    )


def expire_leases(*, batch_size: int = 500) -> list[int]:
    """Executing records whose lease lapsed become ``unknown`` (never ``reserved``).

    Rows locked by another sweeper or a completing caller are skipped, so several workers can
    sweep at once. The batch is announced for reconciliation together, once it commits; returns
    the ids that became unknown.
    """
    table = quote(IdempotencyRecord._meta.db_table)
    lapsed = RawSQL(lapsed_sql(table), [], BooleanField())  # noqa: S611 - from metadata
    expired: list[int] = []
    with transaction.atomic():
        batch = list(
            IdempotencyRecord.objects.select_for_update(skip_locked=True)
            .filter(lapsed)
            .order_by("lease_expires_at")[:batch_size]
        )
        now = db_now()
        for record in batch:
            expire_lapsed(record, now=now, source="worker", announce=False)
            expired.append(record.pk)
        if expired:
            records_became_unknown.send(sender=IdempotencyRecord, record_ids=expired)
    if expired:
        logger.info("lease sweep", extra={"expired": len(expired)})
    return expired
