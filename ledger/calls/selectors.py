"""The reads of the call protocol: the run with its tool, a call's entry (with its record
locked, for a completion), a call's status and a record by its key. The two on the hot path are
written out in SQL from the models' metadata (``ledger.services.statements``)."""

from __future__ import annotations

from datetime import datetime
from functools import cache

from django.db import connection

from ledger.calls.values import Caller
from ledger.errors import InvalidTransition, NotFound, RunNotRunning
from ledger.models import (
    ApprovalRequest,
    IdempotencyRecord,
    LedgerEntry,
    Run,
    Tenant,
    Tool,
    VersionCombination,
)
from ledger.services.statements import fetch_joined, quote, select_columns


def run_and_tool(tenant: Tenant, run_id: str, tool_name: str) -> tuple[Run, Tool | None]:
    """The running run (with its combination) and the registered tool, in one query."""
    found = fetch_joined(
        _run_and_tool_sql(), [tool_name, tenant.pk, run_id], (Run, VersionCombination, Tool)
    )
    if found is None:
        raise NotFound(f"no run {run_id!r}: start it first")
    run, combination, tool = found
    assert isinstance(run, Run)
    run.combination = combination
    if run.status == Run.Status.FINISHED:
        raise RunNotRunning(f"run {run_id!r} has finished ({run.termination_reason})")
    return run, tool


@cache
def _run_and_tool_sql() -> str:
    return (
        f"SELECT {select_columns(Run, 'r')}, {select_columns(VersionCombination, 'c')}, "  # noqa: S608
        f"{select_columns(Tool, 't')} "
        f"FROM {quote(Run._meta.db_table)} r "
        f"LEFT JOIN {quote(VersionCombination._meta.db_table)} c ON c.id = r.combination_id "
        f"LEFT JOIN {quote(Tool._meta.db_table)} t ON t.tenant_id = r.tenant_id AND t.name = %s "
        "WHERE r.tenant_id = %s AND r.run_id = %s"
    )


def entry_for(caller: Caller, call_id: str) -> LedgerEntry:
    """The caller's call, with its tool, record, combination and run."""
    entry = (
        LedgerEntry.objects.select_related("tool", "record", "combination", "run")
        .filter(tenant=caller.tenant, call_id=call_id)
        .first()
    )
    if entry is None:
        raise NotFound(f"no call {call_id}")
    return entry


def entry_with_locked_record(caller: Caller, call_id: str) -> tuple[LedgerEntry, datetime]:
    """The entry with its tool and run, and its record locked (``FOR UPDATE OF`` the record
    only), and the database's clock once the lock is held. Raises when there is no such call
    or it has no record."""
    call_field = LedgerEntry._meta.get_field("call_id")
    found = fetch_joined(
        _entry_with_locked_record_sql(),
        [caller.tenant.pk, call_field.get_db_prep_value(call_id, connection)],
        (LedgerEntry, IdempotencyRecord, Tool, Run),
        trailing=1,
    )
    if found is None:
        entry_for(caller, call_id)  # NotFound when there is no such call at all
        raise InvalidTransition("this call was never started, so it cannot be completed")
    entry, record, tool, run, now = found
    assert isinstance(entry, LedgerEntry)
    entry.record = record
    entry.tool = tool
    entry.run = run
    return entry, now


@cache
def _entry_with_locked_record_sql() -> str:
    # Written out: it runs on every completion, and the ORM spent more time compiling the
    # four-table select_related than PostgreSQL spent answering it (docs/performance.md). The
    # clock is read by the outer query, once the inner one holds the lock.
    return (
        f"SELECT {select_columns(LedgerEntry, 'e')}, {select_columns(IdempotencyRecord, 'r')}, "  # noqa: S608
        f"{select_columns(Tool, 't')}, {select_columns(Run, 'u')}, clock_timestamp() FROM ("
        f"SELECT e.id AS entry_id, r.* FROM {quote(LedgerEntry._meta.db_table)} e "
        f"JOIN {quote(IdempotencyRecord._meta.db_table)} r ON r.id = e.record_id "
        "WHERE e.tenant_id = %s AND e.call_id = %s FOR UPDATE OF r) r "
        f"JOIN {quote(LedgerEntry._meta.db_table)} e ON e.id = r.entry_id "
        f"JOIN {quote(Tool._meta.db_table)} t ON t.id = e.tool_id "
        f"JOIN {quote(Run._meta.db_table)} u ON u.id = e.run_id"
    )


def call_status(*, caller: Caller, call_id: str) -> tuple[LedgerEntry, ApprovalRequest | None]:
    """A call's entry with its record and the latest approval of that record."""
    entry = entry_for(caller, call_id)
    return entry, latest_approval(entry.record) if entry.record is not None else None


def latest_approval(record: IdempotencyRecord) -> ApprovalRequest | None:
    """The record's newest approval request, whatever its state."""
    return ApprovalRequest.objects.filter(record=record).order_by("-pk").first()


def record_by_key(*, caller: Caller, key: str) -> IdempotencyRecord:
    """The caller's tenant's record of ``key``."""
    record = IdempotencyRecord.objects.filter(tenant=caller.tenant, key=key).first()
    if record is None:
        raise NotFound("no record for that idempotency key")
    return record
