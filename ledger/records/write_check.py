"""A write plan's check acted on (DESIGN section 5): ``apply_write_check`` carries out
``decisions.answer_write_check`` on the locked record, for the runtime's replay (a hash it
reports, ``ledger.calls.recover``) and a worker's file check (``reconcile.services``) alike."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.db.models import F
from django.utils.translation import gettext_noop

from ledger.decisions import WriteCheck, WriteCheckAction, WriteCheckAnswer
from ledger.domain import WRITE_CONFLICT_ESCALATION, WRITE_NOT_LANDED_ESCALATION, EscalationKind
from ledger.models import ApprovalRequest, IdempotencyRecord, LedgerEntry, WritePlan
from ledger.records.escalation import escalate
from ledger.records.resolve import resolve_locked
from ledger.records.transitions import Outcome
from ledger.services import approvals
from ledger.services.audit import audit
from ledger.stored_text import StoredText

NOW_HAS_HASH = StoredText(gettext_noop("%(path)s now has hash %(hash)s"))

_ESCALATION = {
    EscalationKind.WRITE_CONFLICT: WRITE_CONFLICT_ESCALATION,
    EscalationKind.WRITE_NOT_LANDED: WRITE_NOT_LANDED_ESCALATION,
}


def write_check_evidence(plan: WritePlan, current_hash: str) -> dict[str, str]:
    """What a file check saw: the evidence of a write settled as already applied."""
    return {"path": plan.path, "current_hash": current_hash}


def apply_write_check(
    locked: IdempotencyRecord,
    answered: WriteCheckAnswer,
    *,
    plan: WritePlan,
    current_hash: str,
    now: datetime,
    record_changes: dict[str, Any] | None = None,
    actor: str,
    source: str,
    entry: LedgerEntry | None = None,
    requester_id: int | None = None,
) -> ApprovalRequest | None:
    """Carry out ``answered`` on ``locked`` (read ``SELECT ... FOR UPDATE`` in the caller's
    transaction, ``now`` the database's clock with it), whose file has ``current_hash``.

    A write that landed settles the record succeeded with the file as evidence, the result a
    downstream look-up records too (``{"evidence", "reconciled"}``, which a compensation reads
    its arguments from); ``record_changes`` are written with it. An escalation is made only if
    the record is not escalated yet: what an operator told the next human stands. An approval
    is asked for on ``entry`` (by default the record's latest), by ``requester_id``'s user if
    any; the request asked for, or the open one joined, is returned."""
    # What the check saw, for the audit trail and beside the condition for the approver.
    found = NOW_HAS_HASH(path=plan.path, hash=current_hash[:12])
    if answered.action is WriteCheckAction.SETTLE:
        resolve_locked(
            locked,
            now=now,
            outcome=Outcome.SUCCEEDED,
            actor=actor,
            source=source,
            result={
                "evidence": write_check_evidence(plan, current_hash),
                "reconciled": answered.check.value,
            },
            detail=found,
            record_changes=record_changes,
        )
        return None
    if answered.check is WriteCheck.APPLY_AGAIN:
        _no_effect_yet(locked, found, actor=actor, source=source)
    if answered.escalation is not None:
        reason = _ESCALATION[answered.escalation]
        escalate(locked, answered.escalation, reason, actor=actor, source=source, once=True)
    if answered.action is not WriteCheckAction.ASK_APPROVAL:
        return None
    return approvals.request_approval(
        record=locked,
        entry=entry or LedgerEntry.objects.filter(record=locked).latest("pk"),
        requested_by=actor,
        requester_id=requester_id,
        detail=found,
        condition=answered.check.value,
    )


def _no_effect_yet(record: IdempotencyRecord, found: str, *, actor: str, source: str) -> None:
    """The file still has the plan's before-hash: no execution so far took effect, so running
    it again once approved is not a duplicate side effect (``metrics``). Audited with what the
    check saw."""
    if record.failed_executions >= record.executions:
        return
    before = {"failed_executions": record.failed_executions}
    IdempotencyRecord.objects.filter(pk=record.pk).update(failed_executions=F("executions"))
    record.failed_executions = record.executions
    audit(
        tenant=record.tenant_id,
        actor=actor,
        action="record.no_effect_found",
        target=record,
        source=source,
        before=before,
        after={"failed_executions": record.failed_executions},
        detail=found,
    )
