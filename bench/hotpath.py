"""The hot path (``calls`` + ``complete`` over HTTP) beside its two floors, and the SQL it costs.

- raw SQL floor: the very statements one tool call sends (captured from a real request), replayed
  by psycopg from the same number of threads, one transaction per request;
- framework floor: ``bench.floor.floor_view`` (one INSERT) through the same gunicorn.
"""

from __future__ import annotations

import dataclasses
import json
import threading
import time
import uuid
from dataclasses import dataclass
from typing import Any

import psycopg
from django.conf import settings
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from bench.load import Http, LoadResult, run_load
from ledger.models import ApiToken, LedgerEntry, Run, Tenant
from ledger.services.statements import numbered

TOOL = "create_order"
RUN_ID = "bench-run"


@dataclass
class Fixture:
    tenant: Tenant
    token: str
    run: Run


def make_fixture() -> Fixture:
    tenant = Tenant.objects.create(slug="bench", name="Bench")
    _token, plaintext = ApiToken.issue(tenant=tenant, name="bench")
    run = Run.objects.create(tenant=tenant, run_id=RUN_ID, user_id="bench-user")
    return Fixture(tenant, plaintext, run)


def call_body(key: str) -> dict[str, Any]:
    return {
        "run_id": RUN_ID,
        "step_id": f"step-{key}",
        "tool": TOOL,
        "input": {"sku": "bench-sku", "quantity": 1},
        "business_object_id": key,
    }


def complete_body(fencing_token: int) -> dict[str, Any]:
    return {"fencing_token": fencing_token, "outcome": "succeeded", "result": {"order": "ok"}}


def tool_call(http: Http, key: str) -> dict[str, float]:
    """One tool call: ``calls`` then ``complete``; returns each request's latency."""
    status, body, calls_took = http.post("/api/v1/calls", call_body(key))
    if status != 200 or body.get("decision") != "execute":
        raise RuntimeError(f"calls answered {status}: {body}")
    path = f"/api/v1/calls/{body['call_id']}/complete"
    status, done, complete_took = http.post(path, complete_body(body["lease"]["fencing_token"]))
    if status != 200:
        raise RuntimeError(f"complete answered {status}: {done}")
    return {"calls": calls_took, "complete": complete_took}


def hot_path(port: int, token: str, clients: int, seconds: float, tag: str) -> LoadResult:
    http = Http(port, token)
    return run_load(clients, seconds, lambda c, i: tool_call(http, f"{tag}-{c}-{i}"))


def framework_floor(port: int, clients: int, seconds: float, tag: str) -> LoadResult:
    http = Http(port)

    def work(client: int, iteration: int) -> dict[str, float]:
        status, _body, took = http.post("/bench/floor", f"{tag}-{client}-{iteration}", raw=True)
        if status != 200:
            raise RuntimeError(f"floor answered {status}")
        return {"floor": took}

    return run_load(clients, seconds, work)


# --- statements per request and the raw SQL floor ------------------------------------------


@dataclass
class Captured:
    """The statements of one ``calls`` and one ``complete``, with what identifies the call."""

    calls: list[tuple[str, Any]]
    complete: list[tuple[str, Any]]
    key: str
    call_id: uuid.UUID
    record_id: int
    entry_id: int


def capture_statements(token: str, key: str) -> tuple[dict[str, Any], Captured]:
    """Run one tool call in-process (autocommit, as in production) and count its statements."""
    client = Client()
    headers = {"Authorization": f"Bearer {token}"}
    statements: list[tuple[str, Any]] = []

    def record(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        statements.append((sql, params))
        return execute(sql, params, many, context)

    with connection.execute_wrapper(record), CaptureQueriesContext(connection) as calls_q:
        response = client.post(
            "/api/v1/calls", call_body(key), content_type="application/json", headers=headers
        )
    body = response.json()
    calls_statements = list(statements)
    statements.clear()
    with connection.execute_wrapper(record), CaptureQueriesContext(connection) as complete_q:
        done = client.post(
            f"/api/v1/calls/{body['call_id']}/complete",
            complete_body(body["lease"]["fencing_token"]),
            content_type="application/json",
            headers=headers,
        )
    assert done.status_code == 200, done.content
    entry = LedgerEntry.objects.get(call_id=body["call_id"])
    assert entry.record_id is not None
    control = ("BEGIN", "COMMIT", "ROLLBACK")
    counts = {
        # Statements the code sends, and the same with transaction control (BEGIN/COMMIT).
        "calls": sum(q["sql"] not in control for q in calls_q.captured_queries),
        "complete": sum(q["sql"] not in control for q in complete_q.captured_queries),
        "calls_with_transaction_control": len(calls_q.captured_queries),
        "complete_with_transaction_control": len(complete_q.captured_queries),
        "calls_sql": [q["sql"][:200] for q in calls_q.captured_queries],
        "complete_sql": [q["sql"][:200] for q in complete_q.captured_queries],
    }
    captured = Captured(
        calls_statements,
        list(statements),
        entry.idempotency_key,
        uuid.UUID(body["call_id"]),
        entry.record_id,
        entry.pk,
    )
    return counts, captured


def _replay(
    cursor: psycopg.Cursor[Any], statements: list[tuple[str, Any]], mapping: dict[Any, Any]
) -> None:
    for sql, params in statements:
        values = [_swap(mapping, p) for p in params or ()]
        cursor.execute(sql, values)
        if "RETURNING" in sql and cursor.description:
            row = cursor.fetchone()
            if row is None:
                continue
            if 'INTO "ledger_idempotencyrecord"' in sql:
                mapping[mapping["old_record"]] = row[0]
                mapping[str(mapping["old_record"])] = str(row[0])
            elif 'INTO "ledger_ledgerentry"' in sql:
                mapping[mapping["old_entry"]] = row[0]


def _swap(mapping: dict[Any, Any], value: Any) -> Any:
    try:
        return mapping.get(value, value)
    except TypeError:  # unhashable (JSON adapters): never an identifier
        return value


def raw_sql_floor(
    dsn: str, captured: Captured, clients: int, seconds: float, tag: str
) -> LoadResult:
    """The same statements as one tool call, straight from psycopg, one connection a thread,
    bound the way the service binds them: when ``DATABASE_PREPARED_STATEMENTS`` is on, as
    ``statements.run_precompiled`` sends them (numbered placeholders, a ``RawCursor``,
    prepared on first use), else client-side."""
    local = threading.local()
    options = settings.DATABASES["default"].get("OPTIONS", {})
    server_side = options.get("server_side_binding") is True
    cursor_factory = psycopg.RawCursor if server_side else psycopg.ClientCursor
    if server_side:
        captured = dataclasses.replace(
            captured,
            calls=[(numbered(sql), params) for sql, params in captured.calls],
            complete=[(numbered(sql), params) for sql, params in captured.complete],
        )

    def work(client: int, iteration: int) -> dict[str, float]:
        if not hasattr(local, "conn"):
            local.conn = psycopg.connect(dsn, autocommit=True, cursor_factory=cursor_factory)
            local.conn.prepare_threshold = 0 if server_side else None
        conn: psycopg.Connection[Any] = local.conn
        key = f"{captured.key}|{tag}-{client}-{iteration}"
        mapping: dict[Any, Any] = {
            captured.key: key,
            captured.call_id: uuid.uuid4(),
            "old_record": captured.record_id,
            "old_entry": captured.entry_id,
        }
        began = time.perf_counter()
        with conn.transaction(), conn.cursor() as cursor:
            _replay(cursor, captured.calls, mapping)
        middle = time.perf_counter()
        with conn.transaction(), conn.cursor() as cursor:
            _replay(cursor, captured.complete, mapping)
        return {"calls": middle - began, "complete": time.perf_counter() - middle}

    return run_load(clients, seconds, work)


def bump_sequences() -> None:
    """Make record and entry ids large and distinct, so the raw floor can swap them safely."""
    with connection.cursor() as cursor:
        for table, start in (
            ("ledger_idempotencyrecord", 10**9),
            ("ledger_ledgerentry", 2 * 10**9),
        ):
            cursor.execute("SELECT setval(pg_get_serial_sequence(%s, 'id'), %s)", [table, start])


def as_json(value: Any) -> str:
    return json.dumps(value, default=str)
