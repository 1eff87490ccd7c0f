"""A record read ``SELECT ... FOR UPDATE`` with the database's clock once the lock is held:
what every transition under the lock decides by and writes (DESIGN section 3, one clock)."""

from __future__ import annotations

from datetime import datetime
from functools import cache
from typing import Any

from ledger.models import IdempotencyRecord
from ledger.records.lease import lapsed_sql
from ledger.sql.statements import fetch_joined, model_field, quote, select_columns

# A record locked by this transaction, and the database's clock once the lock is held.
Locked = tuple[IdempotencyRecord, datetime]


def lock_record(pk: int) -> Locked:
    """The record, read ``SELECT ... FOR UPDATE`` in the caller's transaction, and the
    database's clock after the lock (reconciliation takes this lock for every look-up)."""
    locked = _locked_record(_where("pk"), [pk])
    if locked is None:
        raise IdempotencyRecord.DoesNotExist(f"no record {pk}")
    record, now, _lapsed = locked
    return record, now


def lock_by_key(tenant_id: int, key: str) -> tuple[IdempotencyRecord, datetime, bool] | None:
    """The record of ``key``, locked, with the database's clock and whether, by that clock,
    its lease has lapsed: for a duplicate whose answer needs the lock, or whose record changed
    after the one-statement way read it."""
    return _locked_record(_where("tenant", "key"), [tenant_id, key])


@cache
def _where(*names: str) -> str:
    return " AND ".join(
        f"{quote(str(model_field(IdempotencyRecord, n).column))} = %s" for n in names
    )


def _locked_record(
    where: str, params: list[Any]
) -> tuple[IdempotencyRecord, datetime, bool] | None:
    """The record matching ``where`` (fixed SQL over its columns, values in ``params``), read
    ``SELECT ... FOR UPDATE`` with a precompiled statement, the database's clock once the lock
    is held and the lapse of its lease by that clock; None when there is none."""
    found = fetch_joined(_locked_record_sql(where), params, (IdempotencyRecord,), trailing=2)
    if found is None:
        return None
    now, lapsed = found.values
    return found.one(IdempotencyRecord), now, lapsed


@cache
def _locked_record_sql(where: str) -> str:
    # The clock is read once, by the middle query, on the row the inner one returns once
    # locked: after any wait for the lock, not before it (OFFSET 0 keeps PostgreSQL from
    # folding the middle query into the outer one, which reads the clock a second time).
    table = quote(IdempotencyRecord._meta.db_table)
    return (
        f"SELECT {select_columns(IdempotencyRecord, 'r')}, r.now, {lapsed_sql('r', 'r.now')} "  # noqa: S608
        f"FROM (SELECT locked.*, clock_timestamp() AS now FROM (SELECT * FROM {table} "
        f"WHERE {where} FOR UPDATE) locked OFFSET 0) r"
    )
