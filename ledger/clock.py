"""One clock: PostgreSQL's (DESIGN section 3).

Every time that decides a lease, a lapse, a grace period, an expiry or a deadline is the
database's, never a web or worker process's: processes on several machines disagree about the
time, and one whose clock is skewed must not move a record early or late. The hot path reads
the clock in the statement that decides (``ledger.sql.statements.DbTime``, ``DB_NOW``, or
with a locked row, ``ledger.records.lock_record``); everything else asks here.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from django.db import connection
from django.db.models import DurationField, ExpressionWrapper, F
from django.db.models.expressions import Combinable
from django.db.models.functions import Now


def db_now() -> datetime:
    """The database's clock now (one round trip)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT clock_timestamp()")
        row = cursor.fetchone()
    assert row is not None
    value = row[0]
    assert isinstance(value, datetime)
    return value


def backoff(attempts: int, *, base_seconds: float, cap_seconds: float) -> timedelta:
    """The wait before trying again after ``attempts`` failures: ``base_seconds`` after the
    first, doubled after each one more, never more than ``cap_seconds`` (the worker's look-ups
    and the notifications' deliveries)."""
    doublings = min(max(0, attempts - 1), 62)  # past the cap long before; a float stays finite
    return timedelta(seconds=min(base_seconds * 2**doublings, cap_seconds))


def elapsed_since(moment: Combinable | str) -> ExpressionWrapper:
    """How long ago ``moment`` (a field's name, or an expression such as ``Min(field)``) was,
    by the database's clock, read in the query that reads ``moment``: the ages the console and
    the metrics show."""
    start = F(moment) if isinstance(moment, str) else moment
    return ExpressionWrapper(Now() - start, output_field=DurationField())
