"""Bulk data for the console and cleanup benchmarks, loaded with COPY.

Rows satisfy every constraint of the schema: runs, then terminal (expired) and unknown
idempotency records, then one ledger entry per record.
"""

from __future__ import annotations

import hashlib
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

from django.db import connection

from ledger.models import Tool

CHUNK = 20_000
FINGERPRINT = hashlib.sha256(b"bench").hexdigest()


def _next_id(table: str) -> int:
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT COALESCE(MAX(id), 0) + 1 FROM {table}")  # noqa: S608
        row = cursor.fetchone()
    return int(row[0]) if row else 1


def _set_sequence(table: str, value: int) -> None:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT setval(pg_get_serial_sequence(%s, 'id'), GREATEST(%s, "  # noqa: S608 - our table names
            f"(SELECT COALESCE(MAX(id), 1) FROM {table})))",
            [table, value],
        )


def _copy(table: str, columns: list[str], rows: Iterator[list[Any]]) -> None:
    cols = ", ".join(columns)
    with connection.cursor() as cursor:
        raw = cursor.cursor  # the psycopg cursor
        with raw.copy(f"COPY {table} ({cols}) FROM STDIN") as copy:
            buffer: list[str] = []
            for row in rows:
                buffer.append("\t".join("\\N" if v is None else str(v) for v in row))
                if len(buffer) >= CHUNK:
                    copy.write("\n".join(buffer) + "\n")
                    buffer.clear()
            if buffer:
                copy.write("\n".join(buffer) + "\n")


def load(*, tenant_id: int, tool: Tool, runs: int, records: int, unknown: int) -> dict[str, Any]:
    """``runs`` runs, ``records`` expired terminal records plus ``unknown`` unknown ones, and
    one ledger entry per terminal record (so entries == records)."""
    began = time.monotonic()
    now = datetime.now(UTC)
    first_run = _next_id("ledger_run")
    first_record = _next_id("ledger_idempotencyrecord")
    first_entry = _next_id("ledger_ledgerentry")

    def run_rows() -> Iterator[list[Any]]:
        for i in range(runs):
            started = now - timedelta(seconds=i * 7)
            yield [
                first_run + i,
                tenant_id,
                f"load-run-{i}",
                f"user-{i % 500}",
                "",
                "running",
                "",
                started.isoformat(),
                None,
            ]

    _copy(
        "ledger_run",
        [
            "id",
            "tenant_id",
            "run_id",
            "user_id",
            "agent_id",
            "status",
            "termination_reason",
            "started_at",
            "finished_at",
        ],
        run_rows(),
    )
    _set_sequence("ledger_run", first_run + runs)

    def record_rows() -> Iterator[list[Any]]:
        for i in range(records + unknown):
            created = now - timedelta(days=8, seconds=i)
            terminal = i < records
            state = ("succeeded" if i % 50 else "failed_final") if terminal else "unknown"
            expires = (now - timedelta(hours=1, seconds=i)).isoformat() if terminal else None
            yield [
                first_record + i,
                tenant_id,
                f"agent:bench:u:load-run-{i % runs}:{tool.name}:{i}",
                tool.pk,
                FINGERPRINT,
                state,
                "f",
                '{"ok": true}' if state == "succeeded" else None,
                '{"code": "DECLINED"}' if state == "failed_final" else None,
                "f",
                "",
                None,
                1,
                604800,
                expires,
                0,
                1,
                first_run + i % runs,
                None,
                created.isoformat(),
                created.isoformat(),
                created.isoformat() if terminal else None,
                "non_idempotent",
                1 if state == "failed_final" else 0,
                None if terminal else created.isoformat(),
                0,
                None,
                None,
                None,
                "",
            ]

    _copy(
        "ledger_idempotencyrecord",
        [
            "id",
            "tenant_id",
            "key",
            "tool_id",
            "fingerprint",
            "state",
            "requires_approval",
            "result",
            "error",
            "error_retryable",
            "lease_owner",
            "lease_expires_at",
            "fencing_token",
            "ttl_seconds",
            "expires_at",
            "duplicate_hits",
            "executions",
            "run_id",
            "combination_id",
            "created_at",
            "updated_at",
            "completed_at",
            "classified_as",
            "failed_executions",
            "uncertain_since",
            "reconcile_attempts",
            "next_reconcile_at",
            "reconcile_claimed_until",
            "escalated_at",
            "escalation_reason",
        ],
        record_rows(),
    )
    _set_sequence("ledger_idempotencyrecord", first_record + records + unknown)

    def entry_rows() -> Iterator[list[Any]]:
        for i in range(records):
            created = (now - timedelta(seconds=i * 2)).isoformat()
            status = "succeeded" if i % 50 else "failed"
            yield [
                first_entry + i,
                tenant_id,
                str(uuid.uuid4()),
                f"step-{i}",
                first_run + i % runs,
                tool.pk,
                FINGERPRINT,
                '{"sku": "x"}',
                status,
                "non_idempotent",
                "never",
                "f",
                "bench load",
                "catalogue",
                f"agent:bench:u:load-run-{i % runs}:{tool.name}:{i}",
                first_record + i,
                "execute",
                "",
                "[]",
                "model",
                None,
                "",
                "",
                "internal",
                None,
                1,
                "f",
                created,
                created,
                created,
            ]

    _copy(
        "ledger_ledgerentry",
        [
            "id",
            "tenant_id",
            "call_id",
            "step_id",
            "run_id",
            "tool_id",
            "input_hash",
            "input",
            "status",
            "idempotency",
            "replay_policy",
            "destructive",
            "classification_reason",
            "classification_rule",
            "idempotency_key",
            "record_id",
            "decision",
            "observation_code",
            "side_effects",
            "input_source",
            "caller_token_id",
            "agent_id",
            "end_user_id",
            "data_classification",
            "combination_id",
            "fencing_token",
            "reused_record",
            "created_at",
            "started_at",
            "finished_at",
        ],
        entry_rows(),
    )
    _set_sequence("ledger_ledgerentry", first_entry + records)
    loaded = time.monotonic()
    # What autovacuum would have done by the time a database grew to this size (statistics for
    # the planner, the visibility map for index-only scans), done now: the bench's PostgreSQL
    # may run without autovacuum (CI's machines do), and otherwise it would be doing it while
    # the pages are measured.
    with connection.cursor() as cursor:
        cursor.execute("VACUUM (ANALYZE)")
    return {
        "runs": runs,
        "records": records + unknown,
        "entries": records,
        "load_seconds": round(loaded - began, 1),
        "vacuum_seconds": round(time.monotonic() - loaded, 1),
    }
