"""The hot path (``calls`` + ``complete`` over HTTP) beside its two floors, and the SQL it costs.

- raw SQL floor: the very statements one tool call sends (captured from a real request), replayed
  by psycopg from the same number of threads, one transaction per request;
- framework floor: ``bench.floor.floor_view`` (one INSERT) through the same gunicorn.
"""

from __future__ import annotations

import dataclasses
import json
import pickle
import queue
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
from django.conf import settings
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from bench.load import Http, LoadGenerator, LoadResult
from ledger.models import ApiToken, LedgerEntry, Run, Tenant
from ledger.sql.raw_cursor import numbered

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


@dataclass(frozen=True)
class HotPath:
    """A client's unit of work on the hot path: one tool call with a key of its own."""

    port: int
    token: str
    tag: str

    def __call__(self, client: int, iteration: int) -> dict[str, float]:
        return tool_call(Http(self.port, self.token), f"{self.tag}-{client}-{iteration}")


@dataclass(frozen=True)
class FrameworkFloor:
    """One request to ``bench.floor.floor_view``: one INSERT through the same server."""

    port: int
    tag: str

    def __call__(self, client: int, iteration: int) -> dict[str, float]:
        key = f"{self.tag}-{client}-{iteration}"
        status, _body, took = Http(self.port).post("/bench/floor", key, raw=True)
        if status != 200:
            raise RuntimeError(f"floor answered {status}")
        return {"floor": took}


@dataclass(frozen=True)
class Calls:
    """The tool calls of one model turn: ``size`` new keys, sent alone (``POST /calls`` each,
    ``size`` 1) or together (``POST /calls/batch``). Only the decisions: nothing completes."""

    port: int
    token: str
    tag: str
    size: int
    batch: bool

    def __call__(self, client: int, iteration: int) -> dict[str, float]:
        http = Http(self.port, self.token)
        bodies = [call_body(f"{self.tag}-{client}-{iteration}-{n}") for n in range(self.size)]
        if self.batch:
            status, answer, took = http.post("/api/v1/calls/batch", {"calls": bodies})
            decisions = [item["call"]["decision"] for item in answer["results"]]
        else:
            status, answer, took = http.post("/api/v1/calls", bodies[0])
            decisions = [answer.get("decision")]
        if status != 200 or decisions != ["execute"] * self.size:
            raise RuntimeError(f"calls answered {status}: {answer}")
        return {"batch" if self.batch else "alone": took}


def hot_path(
    load: LoadGenerator, port: int, token: str, clients: int, seconds: float, tag: str
) -> LoadResult:
    return load.run(clients, seconds, HotPath(port, token, tag))


def framework_floor(
    load: LoadGenerator, port: int, clients: int, seconds: float, tag: str
) -> LoadResult:
    return load.run(clients, seconds, FrameworkFloor(port, tag))


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
    calls_atomic: bool  # whether the service sent the request's statements in a transaction
    complete_atomic: bool
    # Per statement, where its first returned row holds a new id: (column, key of the mapping
    # that keeps the captured id), found in the real request's rows (``new_id_columns``).
    calls_ids: list[tuple[tuple[int, str], ...]]
    complete_ids: list[tuple[tuple[int, str], ...]]

    def fresh(self, suffix: str) -> dict[Any, Any]:
        """What to swap in one replayed tool call: a new key and call id; the record's and
        entry's new ids are added as the replay's INSERTs return them."""
        return {
            self.key: f"{self.key}|{suffix}",
            self.call_id: uuid.uuid4(),
            "old_record": self.record_id,
            "old_entry": self.entry_id,
        }

    def handoff(self, mapping: dict[Any, Any]) -> dict[str, Any]:
        """What ``complete`` needs of a replayed ``calls`` (JSON, for the Django SQL floor)."""
        return {
            "key": mapping[self.key],
            "call_id": str(mapping[self.call_id]),
            "record": mapping[self.record_id],
            "entry": mapping[self.entry_id],
        }

    def resume(self, handoff: dict[str, Any]) -> dict[Any, Any]:
        """The mapping of a replayed ``calls``, from its ``handoff``."""
        return {
            "old_record": self.record_id,
            "old_entry": self.entry_id,
            self.key: handoff["key"],
            self.call_id: uuid.UUID(handoff["call_id"]),
            self.record_id: handoff["record"],
            str(self.record_id): str(handoff["record"]),
            self.entry_id: handoff["entry"],
        }

    def bound_for(self, server_side: bool) -> Captured:
        """The statements as ``statements.run_precompiled`` sends them: numbered placeholders
        for a ``RawCursor`` when binding server-side, else as Django wrote them."""
        if not server_side:
            return self
        return dataclasses.replace(
            self,
            calls=[(numbered(sql), params) for sql, params in self.calls],
            complete=[(numbered(sql), params) for sql, params in self.complete],
        )


def capture_statements(token: str, key: str) -> tuple[dict[str, Any], Captured]:
    """Run one tool call in-process (autocommit, as in production) and count its statements."""
    client = Client()
    headers = {"Authorization": f"Bearer {token}"}
    statements: list[tuple[str, Any]] = []
    rows: list[tuple[str | None, ...]] = []

    def record(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        statements.append((sql, params))
        result = execute(sql, params, many, context)
        rows.append(_first_row_text(context["cursor"].cursor))
        return result

    with connection.execute_wrapper(record), CaptureQueriesContext(connection) as calls_q:
        response = client.post(
            "/api/v1/calls", call_body(key), content_type="application/json", headers=headers
        )
    body = response.json()
    calls_statements, calls_rows = list(statements), list(rows)
    statements.clear()
    rows.clear()
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
    new_ids = {"old_record": entry.record_id, "old_entry": entry.pk}
    captured = Captured(
        calls_statements,
        list(statements),
        entry.idempotency_key,
        uuid.UUID(body["call_id"]),
        entry.record_id,
        entry.pk,
        calls_atomic=any(q["sql"] in control for q in calls_q.captured_queries),
        complete_atomic=any(q["sql"] in control for q in complete_q.captured_queries),
        calls_ids=new_id_columns(calls_statements, calls_rows, new_ids),
        complete_ids=new_id_columns(statements, rows, new_ids),
    )
    return counts, captured


def _first_row_text(cursor: psycopg.Cursor[Any]) -> tuple[str | None, ...]:
    """The first row a statement returned, as text, read from the result without moving the
    cursor (the service fetches it after this)."""
    result = cursor.pgresult
    if result is None or not result.ntuples:
        return ()
    values = (result.get_value(0, column) for column in range(result.nfields))
    return tuple(None if v is None else bytes(v).decode(errors="replace") for v in values)


def new_id_columns(
    statements: list[tuple[str, Any]],
    rows: list[tuple[str | None, ...]],
    new_ids: dict[str, int],
) -> list[tuple[tuple[int, str], ...]]:
    """For each statement that inserts into a table of ``NEW_IDS``, the column of its first
    returned row that held the inserted row's id in the real request: a replay reads its own
    new ids from the same columns, whatever else the statement returns and in whatever order."""
    found: list[tuple[tuple[int, str], ...]] = []
    for (sql, _params), row in zip(statements, rows, strict=True):
        columns = tuple(
            (row.index(str(new_ids[old])), old)
            for table, old in NEW_IDS
            if f'INTO "{table}"' in sql and str(new_ids[old]) in row
        )
        found.append(columns)
    return found


def replay(
    cursor: psycopg.Cursor[Any],
    statements: list[tuple[str, Any]],
    id_columns: list[tuple[tuple[int, str], ...]],
    mapping: dict[Any, Any],
) -> None:
    """Send captured statements with the identifiers in ``mapping`` swapped in; the new ids a
    statement returns (in ``id_columns``, ``Captured.calls_ids``) are swapped in from there on."""
    for (sql, params), columns in zip(statements, id_columns, strict=True):
        values = [_swap(mapping, p) for p in params or ()]
        cursor.execute(sql, values)
        if not columns:
            continue
        row = cursor.fetchone()
        if row is None:
            raise RuntimeError(f"a replayed INSERT returned no row: {sql[:200]}")
        for position, old in columns:
            mapping[mapping[old]] = row[position]
            mapping[str(mapping[old])] = str(row[position])


# The tables a tool call inserts into whose new ids later statements use, and the key of the
# mapping that keeps the captured id.
NEW_IDS = (("ledger_idempotencyrecord", "old_record"), ("ledger_ledgerentry", "old_entry"))


def _swap(mapping: dict[Any, Any], value: Any) -> Any:
    try:
        return mapping.get(value, value)
    except TypeError:  # unhashable (JSON adapters): never an identifier
        return value


# Each load generator process keeps its raw floor connections from one load to the next, as a
# pooler would: their backends stay up, so a round's PostgreSQL CPU is counted (bench.cpu).
_IDLE: dict[tuple[str, bool], queue.LifoQueue[psycopg.Connection[Any]]] = {}


class RawSqlFloor:
    """The same statements as one tool call, straight from psycopg, bound the way the service
    binds them: when ``DATABASE_PREPARED_STATEMENTS`` is on, as ``statements.run_precompiled``
    sends them (numbered placeholders, a ``RawCursor``, prepared on first use), else
    client-side. At most ``connections`` transactions are open at once, as many as the
    service's web workers can hold: the clients of a load take turns on them."""

    def __init__(
        self, dsn: str, captured: Captured, server_side: bool, tag: str, connections: int
    ) -> None:
        self.dsn, self.server_side, self.tag = dsn, server_side, tag
        self.captured = captured.bound_for(server_side)
        self.connections = max(1, connections)
        self._turns = threading.BoundedSemaphore(self.connections)

    def __getstate__(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if k != "_turns"}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._turns = threading.BoundedSemaphore(self.connections)

    def share(self, index: int, processes: int) -> RawSqlFloor:
        """The part of the connections that load generator process ``index`` may use."""
        part = self.connections // processes + (index < self.connections % processes)
        share = RawSqlFloor.__new__(RawSqlFloor)
        share.__setstate__({**self.__getstate__(), "connections": max(1, part)})
        return share

    def __call__(self, client: int, iteration: int) -> dict[str, float]:
        idle = _IDLE.setdefault((self.dsn, self.server_side), queue.LifoQueue())
        with self._turns:
            conn = _connect(self.dsn, self.server_side) if idle.empty() else idle.get()
            try:
                mapping = self.captured.fresh(f"{self.tag}-{client}-{iteration}")
                return _replay_tool_call(conn, self.captured, mapping)
            finally:
                idle.put(conn)


def raw_sql_floor(
    load: LoadGenerator,
    dsn: str,
    captured: Captured,
    clients: int,
    seconds: float,
    tag: str,
    *,
    connections: int,
) -> LoadResult:
    """The raw floor from ``load``'s processes, ``connections`` transactions at once in all."""
    work = RawSqlFloor(dsn, captured, binds_server_side(), tag, min(clients, connections))
    return load.run(clients, seconds, work)


def _connect(dsn: str, server_side: bool) -> psycopg.Connection[Any]:
    cursor_factory = psycopg.RawCursor if server_side else psycopg.ClientCursor
    conn = psycopg.connect(dsn, autocommit=True, cursor_factory=cursor_factory)
    conn.prepare_threshold = 0 if server_side else None
    return conn


def _replay_tool_call(
    conn: psycopg.Connection[Any], captured: Captured, mapping: dict[Any, Any]
) -> dict[str, float]:
    """One tool call's statements, a transaction for each request; each request's seconds."""
    began = time.perf_counter()
    with conn.transaction(), conn.cursor() as cursor:
        replay(cursor, captured.calls, captured.calls_ids, mapping)
    middle = time.perf_counter()
    with conn.transaction(), conn.cursor() as cursor:
        replay(cursor, captured.complete, captured.complete_ids, mapping)
    return {"calls": middle - began, "complete": time.perf_counter() - middle}


def verify_replay(dsn: str, captured: Captured) -> None:
    """A replayed tool call must leave its own record and entry as the real one left its: a
    floor that skipped a write (an id not swapped in) would be cheaper than the hot path."""
    server_side = binds_server_side()
    mapping = captured.fresh(f"verify-{uuid.uuid4()}")
    with _connect(dsn, server_side) as conn:
        _replay_tool_call(conn, captured.bound_for(server_side), mapping)
    real = LedgerEntry.objects.select_related("record").get(pk=captured.entry_id)
    replayed = LedgerEntry.objects.select_related("record").get(call_id=mapping[captured.call_id])
    assert replayed.record is not None and real.record is not None
    seen = (replayed.pk, replayed.status, replayed.record.pk, replayed.record.state)
    expected = (
        mapping[captured.entry_id],
        real.status,
        mapping[captured.record_id],
        real.record.state,
    )
    if seen != expected:
        raise RuntimeError(f"a replayed tool call left {seen}, not {expected}")


def binds_server_side() -> bool:
    """Whether the service binds parameters server-side (``DATABASE_PREPARED_STATEMENTS``)."""
    return settings.DATABASES["default"].get("OPTIONS", {}).get("server_side_binding") is True


@dataclass(frozen=True)
class DjangoSqlFloor:
    """The captured statements of a tool call sent by ``bench.floor`` views through the same
    gunicorn and Django stack: two requests, as the hot path makes, with nothing else."""

    port: int
    tag: str

    def __call__(self, client: int, iteration: int) -> dict[str, float]:
        http = Http(self.port)
        key = f"{self.tag}-{client}-{iteration}"
        status, body, calls_took = http.post("/bench/sql-floor/calls", key)
        if status != 200:
            raise RuntimeError(f"SQL floor calls answered {status}: {body}")
        status, done, complete_took = http.post("/bench/sql-floor/complete", body)
        if status != 200:
            raise RuntimeError(f"SQL floor complete answered {status}: {done}")
        return {"calls": calls_took, "complete": complete_took}


def django_sql_floor(
    load: LoadGenerator, port: int, clients: int, seconds: float, tag: str
) -> LoadResult:
    return load.run(clients, seconds, DjangoSqlFloor(port, tag))


def save(captured: Captured, path: Path) -> None:
    """Hand the captured statements to the bench's server (the Django SQL floor's views)."""
    path.write_bytes(pickle.dumps(captured))


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
