"""The floors beneath the hot path, served only by ``bench.urls``:

- the framework floor: the least a Django request through the same server can cost with one
  INSERT;
- the Django SQL floor: the very statements of one ``calls`` and one ``complete`` (captured from
  a real request by the bench, ``BENCH_SQL_FLOOR_STATEMENTS``), sent from views through the same
  server, with nothing else: no authentication in Python, no validation, no model instances, no
  django-ninja. What any Django implementation sending these statements could at best reach.
"""

from __future__ import annotations

import json
import os
import pickle
from contextlib import nullcontext
from functools import cache
from pathlib import Path
from typing import Any

import psycopg
from django.db import connection, transaction
from django.http import HttpRequest, JsonResponse
from django.views.decorators.csrf import csrf_exempt

from bench.hotpath import Captured, binds_server_side, replay

FLOOR_TABLE_SQL = (
    "CREATE TABLE IF NOT EXISTS bench_floor ("
    "id bigserial PRIMARY KEY, key text NOT NULL UNIQUE, created_at timestamptz DEFAULT now())"
)


@csrf_exempt
def floor_view(request: HttpRequest) -> JsonResponse:
    """One INSERT with the key from the body; nothing else."""
    key = request.body.decode() or "missing"
    with connection.cursor() as cursor:
        cursor.execute("INSERT INTO bench_floor (key) VALUES (%s) RETURNING id", [key])
        row = cursor.fetchone()
    return JsonResponse({"id": row[0] if row else None})


@cache
def _captured() -> Captured:
    data = Path(os.environ["BENCH_SQL_FLOOR_STATEMENTS"]).read_bytes()
    captured: Captured = pickle.loads(data)  # noqa: S301 - written by this bench run for it
    return captured.bound_for(binds_server_side())


def _send(
    statements: list[tuple[str, Any]],
    id_columns: list[tuple[tuple[int, str], ...]],
    mapping: dict[Any, Any],
    atomic: bool,
) -> None:
    """The statements as the service sends them (``run_precompiled``): after the connection's
    health check, in a transaction only if it used one, bound server-side and prepared on
    first use when it binds so."""
    connection.close_if_health_check_failed()
    connection.ensure_connection()
    raw = connection.connection
    server_side = binds_server_side()
    previous = raw.prepare_threshold
    raw.prepare_threshold = 0 if server_side else None
    try:
        with transaction.atomic() if atomic else nullcontext():
            factory = psycopg.RawCursor if server_side else psycopg.ClientCursor
            with factory(raw) as cursor:
                replay(cursor, statements, id_columns, mapping)
    finally:
        raw.prepare_threshold = previous


@csrf_exempt
def sql_floor_calls(request: HttpRequest) -> JsonResponse:
    captured = _captured()
    mapping = captured.fresh(json.loads(request.body))
    _send(captured.calls, captured.calls_ids, mapping, captured.calls_atomic)
    return JsonResponse(captured.handoff(mapping))


@csrf_exempt
def sql_floor_complete(request: HttpRequest) -> JsonResponse:
    captured = _captured()
    mapping = captured.resume(json.loads(request.body))
    _send(captured.complete, captured.complete_ids, mapping, captured.complete_atomic)
    return JsonResponse({"completed": True})
