"""Approved writes the runtime will not apply: the ledger's worker applies them.

A worker's file check found a conditional write did not land, and an approver approved
applying it again. The runtime's next retry of the call applies it, using the approval. When no
retry will come (its run is over, or the approval has waited ``RUNTIME_GRACE`` since it was
given), the worker applies the write plan itself, where the plan makes that possible and safe:

- the file still has the plan's before-hash (else the file changed since: a write conflict, for
  an operator);
- the plan's stored diff applied to the file gives exactly the plan's after-hash (a diff that
  was cut or redacted does not: the write waits for an operator, the reason said);
- the approval is used once, under the record's lock, as a runtime's retry would use it; the
  file is replaced atomically, and the call settles as succeeded, the applied plan its result.

A worker that dies after replacing the file and before its transaction commits leaves the file
at the after-hash and the approval unused: the next pass finds the write landed and settles it,
writing nothing. A runtime's retry and the worker serialise on the record's lock: whichever
comes second finds the approval used or the call settled.
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import tempfile
from datetime import timedelta
from pathlib import Path

from django.db import transaction
from django.db.models import Exists, OuterRef, Q
from django.db.models.functions import Now
from django.utils.translation import gettext_noop

from ledger.domain import EscalationKind, RecordState
from ledger.models import (
    ApprovalRequest,
    AuditEvent,
    IdempotencyRecord,
    Run,
    WorkspaceRoot,
    WritePlan,
)
from ledger.records import Outcome, lock_record, resolve_locked
from ledger.records.escalation import escalate, escalated_as
from ledger.services import approvals
from ledger.stored_text import StoredText
from reconcile.filehash import EMPTY_SHA256, PathRefused, confined_path
from reconcile.patches import apply_diff

logger = logging.getLogger(__name__)

#: How long an approved write waits for its runtime's retry while its run is still running.
RUNTIME_GRACE = timedelta(minutes=10)

APPLIED = StoredText(
    gettext_noop(
        "Applied by the ledger's worker after approval #%(approval)s: its runtime did not retry it."
    )
)
CHANGED_SINCE = StoredText(
    gettext_noop(
        "Approved, but the file changed since the write was planned (%(path)s now has sha256 "
        "%(current)s): the worker wrote nothing. Compare it with the plan's diff, then settle "
        "it."
    )
)
CANNOT_APPLY = StoredText(
    gettext_noop(
        "Approved, but the worker cannot apply it (%(why)s) and wrote nothing: apply the diff "
        "by hand and mark it succeeded, or mark it did not happen."
    ),
    texts=("why",),
)


def due(*, limit: int = 50) -> list[int]:
    """Unknown calls whose write did not land, with a granted approval still in time, that no
    runtime will retry: their run is over, or the approval waited ``RUNTIME_GRACE``."""
    granted = ApprovalRequest.objects.filter(
        record=OuterRef("pk"), state=ApprovalRequest.State.APPROVED, expires_at__gt=Now()
    )
    waited = granted.filter(decided_at__lt=Now() - RUNTIME_GRACE)
    return list(
        IdempotencyRecord.objects.filter(
            escalated_as(EscalationKind.WRITE_NOT_LANDED), state=RecordState.UNKNOWN
        )
        .filter(Exists(granted))
        .filter(~Q(run__status=Run.Status.RUNNING) | Exists(waited))
        .order_by("pk")
        .values_list("pk", flat=True)[:limit]
    )


def apply_approved_write(record_id: int, *, worker: str) -> str:
    """Apply one approved write (see the module's rules); what happened: ``applied``,
    ``already-applied``, ``conflict``, ``cannot-apply`` or ``skipped`` (settled meanwhile, or
    its approval used or gone)."""
    actor = f"worker:{worker}"
    source = AuditEvent.Source.WORKER
    with transaction.atomic():
        locked, now = lock_record(record_id)
        approval = (
            ApprovalRequest.objects.select_for_update()
            .select_related("entry")
            .filter(record=locked, state=ApprovalRequest.State.APPROVED)
            .order_by("-pk")
            .first()
        )
        if (
            locked.state != RecordState.UNKNOWN
            or locked.escalation_kind != EscalationKind.WRITE_NOT_LANDED
            or approval is None
            or approvals.expired(approval, now=now)
        ):
            return "skipped"
        plan = locked.write_plan  # the action's, recorded with its first call
        root = (
            None
            if plan is None
            else WorkspaceRoot.objects.filter(
                tenant_id=locked.tenant_id, name=plan.workspace
            ).first()
        )
        if plan is None or root is None:
            why = "its workspace is not registered" if plan else "it has no write plan"
            return _hand_over(locked, CANNOT_APPLY(why=why), actor)
        try:
            target = confined_path(root.path, plan.path)
            content = target.read_bytes() if target.exists() else b""
        except (PathRefused, OSError) as exc:
            return _hand_over(locked, CANNOT_APPLY(why=f"cannot read the file: {exc}"), actor)
        current = hashlib.sha256(content).hexdigest()
        result = {"path": plan.path, "after_hash": plan.after_hash, "approval": approval.pk}
        if current == plan.after_hash:  # written before, by this worker or by hand
            outcome = "already-applied"
        elif current != plan.before_hash:
            escalate(
                locked,
                EscalationKind.WRITE_CONFLICT,
                CHANGED_SINCE(path=plan.path, current=current[:12]),
                actor=actor,
                source=source,
            )
            return "conflict"
        else:
            written = _patched(content, plan)
            if written is None:
                why = "its stored diff does not give the approved content"
                return _hand_over(locked, CANNOT_APPLY(why=why), actor)
            _replace(target, written)
            outcome = "applied"
        approvals.consume(record=locked, entry=approval.entry, actor=actor, source=source)
        resolve_locked(
            locked,
            now=now,
            outcome=Outcome.SUCCEEDED,
            actor=actor,
            source=source,
            result={**result, "applied_by": "worker" if outcome == "applied" else "found"},
            error=None,
            detail=APPLIED(approval=approval.pk),
        )
    logger.info("approved write", extra={"record": record_id, "outcome": outcome})
    return outcome


def _hand_over(record: IdempotencyRecord, reason: str, actor: str) -> str:
    """An approved write the worker cannot apply goes to an operator, the reason said (the
    worker does not pick it again)."""
    escalate(record, EscalationKind.OPERATOR, reason, actor=actor, source=AuditEvent.Source.WORKER)
    return "cannot-apply"


def _patched(content: bytes, plan: WritePlan) -> bytes | None:
    """The file after the plan's diff, when that is exactly the content the plan approved (its
    after-hash), else None."""
    if plan.after_hash == EMPTY_SHA256 or not plan.diff:
        return None
    try:
        lines = apply_diff(content.decode("utf-8"), plan.diff)
    except UnicodeDecodeError:
        return None
    if lines is None:
        return None
    joined = "\n".join(lines)
    # The diff's lines carry no line ends: the approved content decides the last one.
    for candidate in (joined + "\n", joined):
        written = candidate.encode("utf-8")
        if hashlib.sha256(written).hexdigest() == plan.after_hash:
            return written
    return None


def _replace(target: Path, content: bytes) -> None:
    """Write ``content`` to ``target`` atomically: a reader sees the old file or the new one."""
    target.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.")
    try:
        with os.fdopen(handle, "wb") as out:
            out.write(content)
            out.flush()
            os.fsync(out.fileno())
        if target.exists():
            shutil.copymode(target, temporary)
        os.replace(temporary, target)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
