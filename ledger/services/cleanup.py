"""TTL cleanup: terminal records past their ``expires_at`` are deleted in paced batches.

Only ``succeeded`` and ``failed_final`` records ever have an ``expires_at`` (a database
constraint) and a batch is chosen by state, so a record still in flight is never touched; the
batch's rows are locked (skipping rows another cleaner holds) so none changes while it is
deleted. What points at a record is handled as its foreign key's ``on_delete`` says: the ledger
entries stay (the ledger is the history) with the record unlinked; approvals (with their
claims) and reconciliation attempts, which only served the record, go with it.

The locked batch is deleted in one statement (``_batch_statement``): Django's delete would send
a statement for each kind of dependent row with every id as a parameter, and its Python side
cost as much CPU as PostgreSQL's (docs/performance.md).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from functools import cache
from typing import Any, cast

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.db import connection, models, transaction
from django.db.models import QuerySet
from django.db.models.fields.reverse_related import ForeignObjectRel
from django.db.models.functions import Now
from django.db.models.options import Options

from ledger.domain import TERMINAL_RECORD_STATES
from ledger.models import IdempotencyRecord
from ledger.services.audit import audit
from ledger.sql.statements import model_field, quote

logger = logging.getLogger(__name__)

# A batch is followed by a pause at least this many times its own length, so on a slow or busy
# database cleanup takes at most a third of its backend's time and leaves the rest to the hot path.
PAUSE_TO_BATCH_RATIO = 2


def expired_records() -> QuerySet[IdempotencyRecord]:
    """The records the cleanup deletes: terminal, past their TTL."""
    states = [state.value for state in TERMINAL_RECORD_STATES]
    return IdempotencyRecord.objects.filter(state__in=states, expires_at__lte=Now())


def cleanup_expired_records(
    *,
    batch_size: int | None = None,
    max_batches: int = 100,
    on_batch: Callable[[int, float], None] | None = None,
) -> int:
    """Delete terminal records past their TTL in bounded batches; returns how many.

    Batches are paced: ``LEDGER_CLEANUP_PAUSE_MS`` between them, and at least
    ``PAUSE_TO_BATCH_RATIO`` times as long as the batch before took. ``on_batch(deleted,
    seconds)`` is told about each one.
    """
    size = batch_size or settings.LEDGER_CLEANUP_BATCH_SIZE
    pause = settings.LEDGER_CLEANUP_PAUSE_MS / 1000
    total = 0
    took = 0.0
    for batch in range(max_batches):
        if batch:
            time.sleep(max(pause, PAUSE_TO_BATCH_RATIO * took))
        began = time.perf_counter()
        with transaction.atomic():
            ids = list(
                expired_records()
                .select_for_update(skip_locked=True)
                .order_by("expires_at")
                .values_list("pk", flat=True)[:size]
            )
            if not ids:
                break
            count = _delete_locked(ids)
            audit(
                tenant=None,
                actor="system",
                action="records.cleaned_up",
                target=("idempotencyrecord", f"{min(ids)}-{max(ids)}"),
                source="worker",
                after={"deleted": count},
            )
        total += count
        took = time.perf_counter() - began
        logger.info("ttl cleanup batch", extra={"deleted": count})
        if on_batch is not None:
            on_batch(count, took)
        if len(ids) < size:
            break
    return total


def _delete_locked(ids: list[int]) -> int:
    """Delete the batch ``ids``, locked by this transaction; returns how many were deleted."""
    # A statement of its own, after the lock: its snapshot holds every row that points at the
    # batch, and no new one can commit until this transaction ends (its foreign key check
    # waits on the lock). Locking in the same statement would leave a gap: a row committed
    # while the lock was awaited is outside the statement's snapshot, and the deferred
    # foreign key check would then fail the whole batch at commit.
    with connection.cursor() as cursor:
        cursor.execute(_batch_statement(), [ids])
        row = cursor.fetchone()
    return int(row[0]) if row else 0


@cache
def _batch_statement() -> str:
    """The locked batch (its ids, one array parameter) deleted as data-modifying CTEs: the
    ``on_delete`` of every foreign key pointing at it, and at the rows that cascade from it,
    then the records. Built from the models' metadata (identifiers only; values are
    parameters), so it follows the schema."""
    meta = IdempotencyRecord._meta
    pk_field = model_field(IdempotencyRecord, "pk")
    table, pk = quote(meta.db_table), quote(str(pk_field.column))
    doomed = f"doomed AS (SELECT unnest(%s::{pk_field.rel_db_type(connection)}[]) AS {pk})"
    parts = [doomed, *_on_delete(meta, "doomed", {meta.label})]
    deleted = f"DELETE FROM {table} WHERE {pk} IN (SELECT {pk} FROM doomed) RETURNING {pk}"  # noqa: S608
    parts.append(f"deleted AS ({deleted})")
    return f"WITH {', '.join(parts)} SELECT count(*) FROM deleted"  # noqa: S608


def _on_delete(meta: Options[Any], rows: str, seen: set[str]) -> list[str]:
    """CTEs that do what ``on_delete`` says to the rows pointing at those of ``meta`` whose
    primary keys the CTE ``rows`` returns: every relation Django's delete would follow. One
    this cannot do in SQL is an error here, on the first batch, rather than a row left behind
    or a batch that fails at commit."""
    if any(hasattr(field, "bulk_related_objects") for field in meta.private_fields):
        raise _cannot(f"{meta.label} has a generic relation")
    key = quote(str(model_field(meta.model, "pk").column))
    parts = []
    for n, relation in enumerate(_relations_pointing_at(meta)):
        dependent = relation.related_model._meta
        step, table = f"{rows}_{n}", quote(dependent.db_table)
        column = quote(str(relation.field.column))
        where = f"WHERE {column} IN (SELECT {key} FROM {rows})"  # noqa: S608
        if relation.on_delete is models.DO_NOTHING:
            continue
        if not relation.field.target_field.primary_key:
            raise _cannot(f"{relation.field} points at a column other than the primary key")
        if dependent.label in seen:
            # PostgreSQL applies one change to a row per statement: a row reached twice could
            # be updated by one path and not deleted by the other.
            raise _cannot(f"{dependent.label} is reached twice (again through {relation.field})")
        seen.add(dependent.label)
        if relation.on_delete is models.SET_NULL:
            parts.append(f"{step} AS (UPDATE {table} SET {column} = NULL {where})")  # noqa: S608
        elif relation.on_delete is models.CASCADE:
            returning = quote(str(model_field(dependent.model, "pk").column))
            parts.append(f"{step} AS (DELETE FROM {table} {where} RETURNING {returning})")  # noqa: S608
            parts += _on_delete(dependent, step, seen)
        else:
            action = getattr(relation.on_delete, "__name__", repr(relation.on_delete))
            raise _cannot(f"{relation.field} is on_delete={action}")
    return parts


def _relations_pointing_at(meta: Options[Any]) -> list[ForeignObjectRel]:
    """The reverse side of every foreign key and one-to-one field pointing at ``meta``'s model
    (hidden ones too, as ``related_name="+"`` makes them): what a delete of its rows must
    follow, read through the documented ``_meta.get_fields`` API."""
    return [
        cast(ForeignObjectRel, field)
        for field in meta.get_fields(include_hidden=True)
        if field.auto_created and not field.concrete and (field.one_to_many or field.one_to_one)
    ]


def _cannot(reason: str) -> ImproperlyConfigured:
    return ImproperlyConfigured(
        f"TTL cleanup cannot delete idempotency records in one statement: {reason}. Handle it "
        "in ledger.services.cleanup._on_delete."
    )
