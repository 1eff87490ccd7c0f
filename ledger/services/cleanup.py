"""TTL cleanup: terminal records past their ``expires_at`` are deleted in paced batches.

Only ``succeeded`` and ``failed_final`` records ever have an ``expires_at`` (a database
constraint), and a batch locks the rows it deletes, so a record still in flight is never
touched. What points at a record is handled as its foreign key's ``on_delete`` says: the ledger
entries stay (the ledger is the history) with the record unlinked; approvals and reconciliation
attempts, which only served the record, go with it.

On PostgreSQL a batch is one statement (``_batch_statement``): Django's delete would read the
batch's ids, then send a statement for each kind of dependent row with every id as a parameter,
and its Python side cost as much CPU as PostgreSQL's (docs/performance.md, seventh round).
Elsewhere (the embedded SQLite default) it is Django's delete.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from datetime import datetime
from functools import cache
from typing import Any

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.db import connection, models, transaction
from django.db.models.options import Options
from django.utils import timezone

from ledger.domain import TERMINAL_RECORD_STATES
from ledger.models import IdempotencyRecord
from ledger.services.audit import audit
from ledger.services.statements import model_field, quote

logger = logging.getLogger(__name__)

# A batch is followed by a pause at least this many times its own length, so on a slow or busy
# database cleanup takes at most a third of its backend's time and leaves the rest to the hot path.
PAUSE_PER_BATCH_SECOND = 2


def cleanup_expired_records(
    *,
    batch_size: int | None = None,
    max_batches: int = 100,
    on_batch: Callable[[int, float], None] | None = None,
) -> int:
    """Delete terminal records past their TTL in bounded batches; returns how many.

    Batches are paced: ``LEDGER_CLEANUP_PAUSE_MS`` between them, and at least
    ``PAUSE_PER_BATCH_SECOND`` times as long as the batch before took. ``on_batch(deleted,
    seconds)`` is told about each one.
    """
    size = batch_size or settings.LEDGER_CLEANUP_BATCH_SIZE
    pause = settings.LEDGER_CLEANUP_PAUSE_MS / 1000
    states = [state.value for state in TERMINAL_RECORD_STATES]
    total = 0
    took = 0.0
    for batch in range(max_batches):
        if batch and pause:
            time.sleep(max(pause, PAUSE_PER_BATCH_SECOND * took))
        began = time.perf_counter()
        with transaction.atomic():
            count, lowest, highest = _delete_batch(states, timezone.now(), size)
            if not count:
                break
            audit(
                tenant=None,
                actor="system",
                action="records.cleaned_up",
                target=("idempotencyrecord", f"{lowest}-{highest}"),
                source="worker",
                after={"deleted": count},
            )
        total += count
        took = time.perf_counter() - began
        logger.info("ttl cleanup batch", extra={"deleted": count})
        if on_batch is not None:
            on_batch(count, took)
        if count < size:
            break
    return total


def _delete_batch(states: list[str], now: datetime, size: int) -> tuple[int, int, int]:
    """Delete up to ``size`` expired records, oldest expiry first, skipping rows another cleaner
    holds; returns how many, and the lowest and highest id among them."""
    if connection.vendor == "postgresql":
        return _delete_batch_in_one_statement(states, now, size)
    return _delete_batch_with_django(states, now, size)


def _delete_batch_in_one_statement(
    states: list[str], now: datetime, size: int
) -> tuple[int, int, int]:
    with connection.cursor() as cursor:
        cursor.execute(_batch_statement(), [states, now, size])
        count, lowest, highest = cursor.fetchone()
    return count, lowest or 0, highest or 0


def _delete_batch_with_django(states: list[str], now: datetime, size: int) -> tuple[int, int, int]:
    ids = list(
        IdempotencyRecord.objects.select_for_update(skip_locked=True)
        .filter(state__in=states, expires_at__lte=now)
        .order_by("expires_at")
        .values_list("pk", flat=True)[:size]
    )
    if not ids:
        return 0, 0, 0
    # The state is checked again: without row locks (SQLite) a record may have changed since.
    doomed = IdempotencyRecord.objects.filter(pk__in=ids, state__in=states, expires_at__lte=now)
    _deleted, by_model = doomed.only("pk").delete()
    return by_model.get(IdempotencyRecord._meta.label, 0), min(ids), max(ids)


@cache
def _batch_statement() -> str:
    """One batch as data-modifying CTEs: lock the batch, apply the ``on_delete`` of every
    foreign key that points at it (and, for rows that cascade, at them), delete it. Built from
    the models' metadata (identifiers only; values are parameters), so it follows the schema."""
    meta = IdempotencyRecord._meta
    table = quote(meta.db_table)
    pk, state, expires_at = (
        quote(str(model_field(IdempotencyRecord, name).column))
        for name in ("pk", "state", "expires_at")
    )
    doomed = (
        f"doomed AS (SELECT {pk} FROM {table} WHERE {state} = ANY(%s) AND {expires_at} <= %s"  # noqa: S608
        f" ORDER BY {expires_at} LIMIT %s FOR UPDATE SKIP LOCKED)"
    )
    parts = [doomed, *_on_delete(meta, "doomed", (meta.label,))]
    deleted = f"DELETE FROM {table} WHERE {pk} IN (SELECT {pk} FROM doomed) RETURNING {pk}"  # noqa: S608
    parts.append(f"deleted AS ({deleted})")
    return f"WITH {', '.join(parts)} SELECT count(*), min({pk}), max({pk}) FROM deleted"  # noqa: S608


def _on_delete(meta: Options[Any], rows: str, path: tuple[str, ...]) -> list[str]:
    """CTEs that do what ``on_delete`` says to the rows pointing at those of ``meta`` whose
    primary keys the CTE ``rows`` returns. A relation this cannot do in SQL is an error here,
    on the first batch, rather than a row left behind."""
    key = quote(str(model_field(meta.model, "pk").column))
    parts = []
    for n, relation in enumerate(meta.related_objects):
        dependent = relation.related_model._meta
        step, table = f"{rows}_{n}", quote(dependent.db_table)
        column = quote(str(relation.field.column))
        where = f"WHERE {column} IN (SELECT {key} FROM {rows})"  # noqa: S608
        handled = relation.field.target_field.primary_key and dependent.label not in path
        if handled and relation.on_delete is models.SET_NULL:
            parts.append(f"{step} AS (UPDATE {table} SET {column} = NULL {where})")  # noqa: S608
        elif handled and relation.on_delete is models.CASCADE:
            returning = quote(str(model_field(dependent.model, "pk").column))
            parts.append(f"{step} AS (DELETE FROM {table} {where} RETURNING {returning})")  # noqa: S608
            parts += _on_delete(dependent, step, (*path, dependent.label))
        else:
            action = getattr(relation.on_delete, "__name__", "a many-to-many delete")
            raise ImproperlyConfigured(
                f"TTL cleanup cannot apply {action} of {relation.field} in SQL: handle it in "
                "ledger.services.cleanup._on_delete"
            )
    return parts
