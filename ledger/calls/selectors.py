"""The reads of the call protocol: the run with its tool, a call's entry (with its record
locked, for a completion), a call's status and a record by its key. The two on the hot path are
written out in SQL from the models' metadata (``ledger.sql.statements``)."""

from __future__ import annotations

from datetime import datetime
from functools import cache

from django.db import connection

from ledger.approval_policies import PolicySpec
from ledger.calls.values import Caller
from ledger.errors import InvalidTransition, NotFound, RunNotRunning
from ledger.models import (
    ApprovalPolicy,
    ApprovalRequest,
    IdempotencyRecord,
    LedgerEntry,
    Run,
    Tenant,
    Tool,
    VersionCombination,
)
from ledger.sql.statements import column, fetch_joined, select_columns, table


def run_and_tool(
    tenant: Tenant, run_id: str, tool_name: str
) -> tuple[Run, Tool | None, list[PolicySpec]]:
    """The running run (with its combination), the registered tool and the tenant's approval
    policies, in one query."""
    found = fetch_joined(
        _run_and_tool_sql(),
        [tool_name, tenant.pk, run_id],
        (Run, VersionCombination, Tool),
        trailing=1,
    )
    if found is None:
        raise NotFound(f"no run {run_id!r}: start it first")
    run, tool = found.one(Run), found.optional(Tool)
    run.combination = found.optional(VersionCombination)
    if run.status == Run.Status.FINISHED:
        raise RunNotRunning(f"run {run_id!r} has finished ({run.termination_reason})")
    (policies,) = found.values
    return run, tool, [PolicySpec.of(row) for row in policies]


@cache
def _run_and_tool_sql() -> str:
    run_tenant = column(Run, "tenant", "r")
    fields = ", ".join(
        f"'{name}', {column(ApprovalPolicy, name, 'p')}"
        for name in ("id", "name", "reason", "tool", "path", "operator", "value", "write_prefix")
    )
    # The tenant's policies ride along as one JSON array: none (the usual case) costs a probe
    # of an index, and a call never needs a statement of its own to learn them.
    policies = (
        f"(SELECT coalesce(json_agg(json_build_object({fields}, 'combination_id', "  # noqa: S608
        f"{column(ApprovalPolicy, 'combination', 'p')})), '[]') FROM {table(ApprovalPolicy)} p "
        f"WHERE {column(ApprovalPolicy, 'tenant', 'p')} = {run_tenant})"
    )
    return (
        f"SELECT {select_columns(Run, 'r')}, {select_columns(VersionCombination, 'c')}, "  # noqa: S608
        f"{select_columns(Tool, 't')}, {policies} FROM {table(Run)} r "
        f"LEFT JOIN {table(VersionCombination)} c "
        f"ON {column(VersionCombination, 'pk', 'c')} = {column(Run, 'combination', 'r')} "
        f"LEFT JOIN {table(Tool)} t "
        f"ON {column(Tool, 'tenant', 't')} = {run_tenant} AND {column(Tool, 'name', 't')} = %s "
        f"WHERE {run_tenant} = %s AND {column(Run, 'run_id', 'r')} = %s"
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
    entry = found.one(LedgerEntry)
    entry.record = found.one(IdempotencyRecord)
    entry.tool = found.one(Tool)
    entry.run = found.one(Run)
    (now,) = found.values
    return entry, now


@cache
def _entry_with_locked_record_sql() -> str:
    # Written out: it runs on every completion, and the ORM spent more time compiling the
    # four-table select_related than PostgreSQL spent answering it (docs/performance.md). The
    # clock is read by the outer query, once the inner one holds the lock.
    entry = column(LedgerEntry, "pk", "e")
    return (
        f"SELECT {select_columns(LedgerEntry, 'e')}, {select_columns(IdempotencyRecord, 'r')}, "  # noqa: S608
        f"{select_columns(Tool, 't')}, {select_columns(Run, 'u')}, clock_timestamp() FROM ("
        f"SELECT {entry} AS entry_id, r.* FROM {table(LedgerEntry)} e "
        f"JOIN {table(IdempotencyRecord)} r "
        f"ON {column(IdempotencyRecord, 'pk', 'r')} = {column(LedgerEntry, 'record', 'e')} "
        f"WHERE {column(LedgerEntry, 'tenant', 'e')} = %s "
        f"AND {column(LedgerEntry, 'call_id', 'e')} = %s FOR UPDATE OF r) r "
        f"JOIN {table(LedgerEntry)} e ON {entry} = r.entry_id "
        f"JOIN {table(Tool)} t ON {column(Tool, 'pk', 't')} = {column(LedgerEntry, 'tool', 'e')} "
        f"JOIN {table(Run)} u ON {column(Run, 'pk', 'u')} = {column(LedgerEntry, 'run', 'e')}"
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
