"""The one place the ledger reaches into Django's database wrapper: a cursor that behaves as
``connection.cursor()`` does (the health check, the thread check, Django's error classes and
execute wrappers) over a psycopg ``RawCursor``, which takes PostgreSQL's numbered placeholders
and so spares psycopg parsing the text for ``%s`` on every call. It calls methods of
``BaseDatabaseWrapper`` that Django does not document (``close_if_health_check_failed``,
``validate_thread_sharing``, ``make_cursor``); ``tests/test_raw_cursor.py`` fails when one of
them changes.
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Any, cast

import psycopg
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.backends.utils import CursorWrapper
from psycopg.pq import Format

_TIMESTAMPTZ_OID = psycopg.postgres.types["timestamptz"].oid

_PLACEHOLDER = re.compile(r"%(.|$)", re.DOTALL)


@lru_cache(maxsize=1024)
def numbered(sql: str) -> str:
    """``sql`` with psycopg's placeholders (``%s``, and ``%%`` for a percent sign) written as
    PostgreSQL's own (``$1``, ``$2``, ...), as psycopg would send them, for a ``RawCursor``."""
    count = 0

    def number(match: re.Match[str]) -> str:
        nonlocal count
        if match.group(1) == "%":
            return "%"
        if match.group(1) != "s":
            raise ValueError(f"only %s placeholders are supported: {match.group(0)!r} in {sql}")
        count += 1
        return f"${count}"

    return _PLACEHOLDER.sub(number, sql)


def precompiled_cursor(db: BaseDatabaseWrapper, sql: str) -> tuple[CursorWrapper, str]:
    """A cursor as ``connection.cursor()`` gives (health check, Django's error wrapping and
    execute wrappers) over a psycopg ``RawCursor``, and ``sql`` numbered for it. Django's own
    cursor and ``sql`` as it is where Django would do more with the text or the cursor: when
    it logs queries (``DEBUG``, tests counting them), it fills the values into the ``%s`` text
    for the log; when the time zone of loaded timestamps differs from the connection's (a
    changed ``TIME_ZONE``), it sets the zone on the cursor."""
    if db.queries_logged:
        return db.cursor(), sql
    db.close_if_health_check_failed()
    db.ensure_connection()
    db.validate_thread_sharing()
    raw = db.connection
    loader = raw.adapters.get_loader(_TIMESTAMPTZ_OID, Format.TEXT)
    if getattr(loader, "timezone", None) != db.timezone:
        return db.cursor(), sql
    with db.wrap_database_errors:
        cursor = psycopg.RawCursor(raw)
    # Wrapped as Django wraps its own (django-stubs types the argument as the wrapper).
    return db.make_cursor(cast(Any, cursor)), numbered(sql)
