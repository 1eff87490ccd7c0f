"""A snapshot of the file for every write conflict a human is asked to settle.

A conditional write's file changed under it: a human decides what happened, and needs to see
what is there (``file_snapshots``). The worker's own file check keeps the snapshot with the
conflict it finds (``services``). A conflict escalated otherwise, by the runtime's replay
(which reports only the file's hash) or by an approved write the worker found changed
(``approved_writes``), gets one here, from the worker that reads the workspaces (the
"reconcile" queue's): once per escalation, recorded as a look-up of the file.
"""

from __future__ import annotations

from django.db import transaction
from django.db.models import Exists, F, OuterRef, Q, QuerySet, Subquery

from ledger.domain import EscalationKind, RecordState
from ledger.models import IdempotencyRecord, WorkspaceRoot
from ledger.records import lock_record
from ledger.records.escalation import escalated_as
from reconcile import services
from reconcile.models import ReconcileAttempt


def _due() -> QuerySet[IdempotencyRecord]:
    """Unknown calls escalated as write conflicts whose file the worker can read (their
    workspace is registered) and whose newest look-up of the file is neither a conflict (the
    worker's own check keeps its snapshot) nor made since they were escalated (a snapshot, or
    a try that could not read the file)."""
    registered = WorkspaceRoot.objects.filter(
        tenant_id=OuterRef("tenant_id"), name=OuterRef("workspace")
    )
    readable = IdempotencyRecord.write_plans(id=OuterRef("pk")).filter(Exists(registered))
    newest = ReconcileAttempt.objects.filter(
        record=OuterRef("pk"), kind=ReconcileAttempt.Kind.FILE_HASH
    ).order_by("-pk")
    return (
        IdempotencyRecord.objects.filter(
            escalated_as(EscalationKind.WRITE_CONFLICT), state=RecordState.UNKNOWN
        )
        .filter(Exists(readable))
        .annotate(
            looked=Subquery(newest.values("outcome")[:1]),
            looked_at=Subquery(newest.values("created_at")[:1]),
        )
        .filter(
            Q(looked__isnull=True)
            | (~Q(looked=ReconcileAttempt.Answer.CONFLICT) & Q(looked_at__lt=F("escalated_at")))
        )
    )


def due(*, limit: int = 50) -> list[int]:
    """The calls ``snapshot_conflict`` is for, oldest first."""
    return list(_due().order_by("pk").values_list("pk", flat=True)[:limit])


def snapshot_conflict(record_id: int, *, worker: str) -> str:
    """Look at one escalated conflict's file and keep what it found: the look-up's outcome
    (``conflict`` with the snapshot; another when the file now has the plan's before- or
    after-hash, or cannot be read, said in the attempt; a human still decides either way), or
    ``skipped`` (settled, or looked at, meanwhile)."""
    record = IdempotencyRecord.objects.filter(pk=record_id).first()
    plan = None if record is None else record.write_plan
    root = (
        None
        if record is None or plan is None
        else WorkspaceRoot.objects.filter(tenant_id=record.tenant_id, name=plan.workspace).first()
    )
    if plan is None or root is None:
        return "skipped"
    finding = services.file_finding(plan, root)  # outside the lock: the file may be slow
    with transaction.atomic():
        locked, _now = lock_record(record_id)
        if not _due().filter(pk=record_id).exists():
            return "skipped"
        services.record_attempt(locked, finding, worker)
    return finding.outcome
