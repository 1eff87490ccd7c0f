"""Turning unknown outcomes into known ones, without ever executing a side effect twice.

A record whose outcome is unknown is *looked up*, never re-run: a conditional write is checked
against the file's hash under a registered workspace root; anything else is looked up
downstream by its idempotency key through the tool's adapter. Every attempt is recorded and
audited; a record that cannot be settled is escalated to a human.

Concurrency: a worker claims a record with a conditional UPDATE (``reconcile_claimed_until``)
before the slow look-up, so two workers never look up the same record at once, and the claim
lapses by itself if the worker dies. The look-up runs outside any transaction; the outcome is
written in one transaction that re-checks the record is still unknown.
"""

from __future__ import annotations

import logging
import os
import socket
from contextlib import suppress
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from functools import cache, partial
from typing import Any

from celery.exceptions import SoftTimeLimitExceeded
from django.conf import settings
from django.db import transaction
from django.db.models import Q
from django.db.models.functions import Now
from django.utils.translation import gettext_noop

from ledger import tracing
from ledger.clock import backoff
from ledger.decisions import WriteCheck, WriteCheckAction, answer_write_check, check_write_plan
from ledger.domain import EscalationKind, RecordState, not_executed
from ledger.models import AuditEvent, IdempotencyRecord, LedgerEntry, Tool, WorkspaceRoot, WritePlan
from ledger.records import (
    Outcome,
    apply_write_check,
    lock_record,
    resolve_locked,
    stored_classification,
    write_check_evidence,
)
from ledger.records.escalation import claimable_sql, escalate
from ledger.redaction import redact_for_storage, redact_text
from ledger.services.audit import audit_event
from ledger.services.metrics import RECONCILE_ATTEMPT_ACTION
from ledger.sql.statements import (
    DB_NOW,
    column,
    execute_update,
    fetch_joined,
    insert_all,
    select_columns,
    table,
)
from ledger.stored_text import StoredText
from reconcile.adapters import LookupOutcome, LookupResult, lookup_for
from reconcile.coverage import plan_check
from reconcile.file_snapshots import file_snapshot
from reconcile.filehash import PathRefused, file_sha256
from reconcile.models import DownstreamAdapter, ReconcileAttempt

logger = logging.getLogger(__name__)
Answer = ReconcileAttempt.Answer
#: The outcomes of a look-up that got no answer: its trace span is an error.
NO_ANSWER = frozenset(
    {Answer.UNREACHABLE, Answer.TIMEOUT, Answer.MALFORMED, Answer.REFUSED, Answer.NO_CHECK}
)


LOOKUPS_FAILED = StoredText(
    gettext_noop("%(attempts)s look-ups failed (%(detail)s); resolve by hand."), texts=("detail",)
)


def worker_name() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def due_records(*, limit: int) -> list[int]:
    """Unknown records that are due for a look-up (``IdempotencyRecord.awaiting_lookup_q``, and
    their next time come); pushes their next time out so the next sweep does not enqueue them
    again while their messages are in the queue. Due by the database's clock."""
    due = IdempotencyRecord.awaiting_lookup_q() & (
        Q(next_reconcile_at__isnull=True) | Q(next_reconcile_at__lte=Now())
    )
    with transaction.atomic():
        ids = list(
            IdempotencyRecord.objects.select_for_update(skip_locked=True)
            .filter(due)
            .order_by("next_reconcile_at", "pk")
            .values_list("pk", flat=True)[:limit]
        )
        IdempotencyRecord.objects.filter(pk__in=ids).update(
            next_reconcile_at=Now() + timedelta(seconds=settings.RECONCILE_REQUEUE_SECONDS)
        )
    return ids


Claimed = tuple[IdempotencyRecord, DownstreamAdapter | None, WritePlan | None]


def _claim(record_id: int) -> Claimed | None:
    """Claim an unknown record for one look-up, and read what the look-up needs: the record
    with its tool, the tool's downstream adapter and the call's write plan. None when the
    record is settled, escalated or claimed by another worker. One statement (it runs for every
    look-up; docs/performance.md), the claim judged and set by the database's clock."""
    found = fetch_joined(
        _claim_sql(),
        [float(settings.RECONCILE_CLAIM_SECONDS), record_id],
        (IdempotencyRecord, Tool, DownstreamAdapter, WritePlan),
    )
    if found is None:
        return None
    record, tool = found.one(IdempotencyRecord), found.one(Tool)
    record.tool = tool
    adapter = found.optional(DownstreamAdapter)
    if adapter is not None:
        adapter.tool = tool
    return record, adapter, found.optional(WritePlan)


@cache
def _claim_sql() -> str:
    record = IdempotencyRecord
    return (
        f"WITH claimed AS (UPDATE {table(record)} "  # noqa: S608 - from metadata
        f"SET {column(record, 'reconcile_claimed_until')} = "
        f"{DB_NOW} + make_interval(secs => %s::float8) "
        f"WHERE {column(record, 'pk')} = %s AND {claimable_sql(table(record))} "
        "RETURNING *) "
        f"SELECT {select_columns(record, 'r')}, {select_columns(Tool, 't')}, "
        f"{select_columns(DownstreamAdapter, 'a')}, {select_columns(WritePlan, 'p')} "
        f"FROM claimed r JOIN {table(Tool)} t "
        f"ON {column(Tool, 'pk', 't')} = {column(record, 'tool', 'r')} "
        f"LEFT JOIN LATERAL (SELECT d.* FROM {table(DownstreamAdapter)} d "
        f"WHERE {column(DownstreamAdapter, 'tool', 'd')} = {column(record, 'tool', 'r')} "
        f"ORDER BY {column(DownstreamAdapter, 'pk', 'd')} LIMIT 1) a ON TRUE "
        f"LEFT JOIN LATERAL (SELECT w.* FROM {table(WritePlan)} w "
        f"JOIN {table(LedgerEntry)} e "
        f"ON {column(LedgerEntry, 'pk', 'e')} = {column(WritePlan, 'entry', 'w')} "
        f"WHERE {column(LedgerEntry, 'record', 'e')} = {column(record, 'pk', 'r')} "
        f"ORDER BY {column(WritePlan, 'pk', 'w')} LIMIT 1) p ON TRUE"
    )


@dataclass(frozen=True, slots=True)
class Finding:
    """What a look-up or a file check found, before it is applied."""

    kind: str
    outcome: str
    detail: str
    evidence: Any = None
    #: A file check's outcome, applied by ``records.apply_write_check``.
    check: WriteCheck | None = None


def reconcile_record(record_id: int, *, worker: str | None = None) -> str:
    """Look up one unknown record and settle it if the evidence allows. Safe to run twice."""
    worker = worker or worker_name()
    claimed = _claim(record_id)
    if claimed is None:
        return "skipped"  # settled, escalated, or another worker holds it
    record, adapter, plan = claimed
    with tracing.lookup_span(record) as span:
        finding = _find(record, adapter, plan)
        result = _apply(record, finding, adapter, plan, worker)
        if span.is_recording():  # one more read, only when the span is exported
            state = IdempotencyRecord.objects.filter(pk=record.pk).values_list("state", flat=True)
            tracing.describe_lookup(
                span,
                outcome=finding.outcome,
                result=result,
                state=state.first() or "deleted",
                failed=finding.outcome in NO_ANSWER,
            )
    return result


def _find(
    record: IdempotencyRecord, adapter: DownstreamAdapter | None, plan: WritePlan | None
) -> Finding:
    """What the check ``coverage.plan_check`` picks for ``record`` finds."""
    root = (
        None
        if plan is None
        else WorkspaceRoot.objects.filter(tenant_id=record.tenant_id, name=plan.workspace).first()
    )
    check = plan_check(
        record,
        workspace=None if plan is None else plan.workspace,
        registered=root is not None,
        has_adapter=adapter is not None,
    )
    if check.missing:
        return Finding(check.kind, Answer.NO_CHECK, check.missing)
    if check.kind == ReconcileAttempt.Kind.FILE_HASH:
        assert plan is not None and root is not None
        return file_finding(plan, root)
    assert adapter is not None
    return _look_up(record, adapter)


def file_finding(plan: WritePlan, root: WorkspaceRoot) -> Finding:
    """What the file of ``plan`` under ``root`` says of the write: landed, not landed, or a
    conflict, which keeps a snapshot of the file for the human who settles it."""
    kind = ReconcileAttempt.Kind.FILE_HASH
    try:
        current = file_sha256(root.path, plan.path)
    except PathRefused as exc:
        return Finding(kind, Answer.REFUSED, f"path refused: {exc}")
    except OSError as exc:
        return Finding(kind, Answer.UNREACHABLE, f"cannot read the file: {exc.strerror}")
    check = check_write_plan(
        current_hash=current, before_hash=plan.before_hash, after_hash=plan.after_hash
    )
    outcome = {
        WriteCheck.ALREADY_APPLIED: Answer.ALREADY_APPLIED,
        WriteCheck.APPLY_AGAIN: Answer.APPLY_AGAIN,
        WriteCheck.CONFLICT: Answer.CONFLICT,
    }[check]
    evidence: dict[str, Any] = write_check_evidence(plan, current)
    if check is WriteCheck.CONFLICT:
        with suppress(PathRefused, OSError):  # changed again since it was hashed: hash only
            evidence["snapshot"] = file_snapshot(root.path, plan)
    return Finding(kind, outcome, f"{plan.path}: sha256 {current[:12]}…", evidence, check)


def _look_up(record: IdempotencyRecord, adapter: DownstreamAdapter) -> Finding:
    try:
        result = lookup_for(adapter).lookup(idempotency_key=record.key, tool=record.tool.name)
    except SoftTimeLimitExceeded:
        result = LookupResult(LookupOutcome.TIMEOUT, "the look-up ran past the task's time limit")
    except Exception as exc:
        result = LookupResult(LookupOutcome.UNREACHABLE, f"adapter failed: {exc!r}"[:500])
    return Finding(
        ReconcileAttempt.Kind.DOWNSTREAM, result.outcome.value, result.detail, result.evidence
    )


def _apply(
    record: IdempotencyRecord,
    finding: Finding,
    adapter: DownstreamAdapter | None,
    plan: WritePlan | None,
    worker: str,
) -> str:
    actor = f"worker:{worker}"
    with transaction.atomic():
        locked, now = lock_record(record.pk)
        if locked.state != RecordState.UNKNOWN:
            return "already-settled"  # a late completion or a human got there first
        attempt_no = locked.reconcile_attempts + 1
        grace = timedelta(seconds=adapter.grace_seconds if adapter else 0)
        if (
            finding.outcome == Answer.NOT_FOUND
            and locked.uncertain_since
            and now - locked.uncertain_since < grace
        ):
            # Too early to believe "not found": the downstream may not have caught up yet.
            finding = Finding(finding.kind, Answer.NOT_FOUND_IN_GRACE, finding.detail)
        finding = _redacted(finding)
        _insert_attempt(locked, finding, worker, attempt_no)
        lookup = _Lookup(locked, adapter, plan, actor, now, attempt_no)
        result, again_at = _settle(lookup, finding)
        if locked.state == RecordState.UNKNOWN:  # not resolved: a resolution wrote its count
            changes = lookup.counted()
            if again_at is not None:
                changes["next_reconcile_at"] = again_at
            execute_update(IdempotencyRecord, {"pk": locked.pk}, changes)
    logger.info(
        "reconcile", extra={"record": record.pk, "outcome": finding.outcome, "result": result}
    )
    return result


def record_attempt(locked: IdempotencyRecord, finding: Finding, worker: str) -> None:
    """Keep a look-up of a locked record that settles nothing (a human decides it): its
    attempt and audit event, and the record's count of look-ups."""
    attempt_no = locked.reconcile_attempts + 1
    _insert_attempt(locked, _redacted(finding), worker, attempt_no)
    execute_update(IdempotencyRecord, {"pk": locked.pk}, {"reconcile_attempts": attempt_no})
    locked.reconcile_attempts = attempt_no


def _redacted(finding: Finding) -> Finding:
    # Downstream error texts may carry URLs with credentials or personal data.
    return replace(finding, detail=redact_text(finding.detail, limit=1000))


def _insert_attempt(
    locked: IdempotencyRecord, finding: Finding, worker: str, attempt_no: int
) -> None:
    """The attempt ``attempt_no`` of a locked record and its audit event, in one statement;
    its evidence redacted for storage."""
    attempt = ReconcileAttempt(
        tenant_id=locked.tenant_id,
        record=locked,
        attempt=attempt_no,
        kind=finding.kind,
        outcome=finding.outcome,
        detail=finding.detail,
        evidence=_stored_evidence(locked, finding.evidence),
        worker=worker,
    )
    event = audit_event(
        tenant=locked.tenant_id,
        actor=f"worker:{worker}",
        action=RECONCILE_ATTEMPT_ACTION,
        target=locked,
        source=AuditEvent.Source.WORKER,
        after={"attempt": attempt_no, "outcome": finding.outcome},
        detail=finding.detail,
    )
    insert_all(attempt, event)


def _stored_evidence(record: IdempotencyRecord, evidence: Any) -> Any:
    """What an attempt keeps of what it found: redacted by the action's data classification,
    as the record's result is when the evidence settles it (``records.resolve_locked``)."""
    if evidence is None:
        return None
    return redact_for_storage(evidence, stored_classification(record))


@dataclass(frozen=True, slots=True)
class _Lookup:
    """One look-up of a locked unknown record: what its finding is applied with."""

    record: IdempotencyRecord
    adapter: DownstreamAdapter | None
    plan: WritePlan | None
    actor: str
    now: datetime
    attempt_no: int

    def counted(self) -> dict[str, Any]:
        """What every look-up writes to its record, with a resolution or alone: its count, and
        the worker's claim released."""
        return {"reconcile_attempts": self.attempt_no, "reconcile_claimed_until": None}


def _settle(lookup: _Lookup, finding: Finding) -> tuple[str, datetime | None]:
    """Apply a finding to a locked unknown record: resolve it (writing the look-up's count with
    it) or leave it unknown. Returns the result and, for a record to be looked up again, when."""
    record, adapter, now = lookup.record, lookup.adapter, lookup.now
    outcome = finding.outcome
    resolve = partial(
        resolve_locked,
        record,
        now=now,
        actor=lookup.actor,
        source=AuditEvent.Source.WORKER,
        detail=finding.detail,
        record_changes=lookup.counted(),
    )
    if finding.check is not None and lookup.plan is not None:
        answered = answer_write_check(finding.check, uncertain=True)
        apply_write_check(
            record,
            answered,
            plan=lookup.plan,
            current_hash=finding.evidence["current_hash"],
            now=now,
            actor=lookup.actor,
            source=AuditEvent.Source.WORKER,
            record_changes=lookup.counted(),
        )
        return ("succeeded" if answered.action is WriteCheckAction.SETTLE else "escalated"), None
    if outcome == Answer.FOUND:
        resolve(
            outcome=Outcome.SUCCEEDED,
            result={"evidence": finding.evidence, "reconciled": outcome},
        )
        return "succeeded", None
    if outcome == Answer.NOT_FOUND_IN_GRACE and adapter is not None:
        assert record.uncertain_since is not None
        return "not-found-in-grace", record.uncertain_since + timedelta(
            seconds=adapter.grace_seconds
        )
    if outcome == Answer.NOT_FOUND:
        resolve(
            outcome=Outcome.FAILED,
            error=not_executed(
                "The downstream has no action with this key; it is safe to retry with the same key."
            ),
        )
        return "failed_final", None
    if outcome in (Answer.NO_CHECK, Answer.REFUSED):
        return _escalate(record, EscalationKind.NO_CHECK, finding.detail), None
    # Unreachable, timeout, malformed: try again later, then ask a human.
    limit = adapter.max_attempts if adapter else settings.RECONCILE_MAX_ATTEMPTS
    if lookup.attempt_no >= limit:
        reason = LOOKUPS_FAILED(attempts=lookup.attempt_no, detail=finding.detail)
        return _escalate(record, EscalationKind.LOOKUPS_EXHAUSTED, reason), None
    return "retry-later", now + backoff(
        lookup.attempt_no, base_seconds=settings.RECONCILE_BASE_DELAY_SECONDS, cap_seconds=600
    )


def _escalate(record: IdempotencyRecord, kind: EscalationKind, reason: str) -> str:
    """A locked unknown record the worker cannot settle goes to a human."""
    escalate(record, kind, reason, actor="system", source=AuditEvent.Source.WORKER)
    return "escalated"
