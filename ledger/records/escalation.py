"""Escalation: an unknown call handed to a human (DESIGN section 7), for a reason of a kind.

A worker escalates what its look-ups cannot settle, the runtime's replay a write conflict, an
operator whatever they choose; each goes through ``escalate``. An escalated call is no longer
looked up automatically (``reconcile.services.due_records``) until an operator asks for a
look-up again.
"""

from __future__ import annotations

from django.db.models import Q
from django.db.models.functions import Now

from ledger.domain import EscalationKind, RecordState
from ledger.models import IdempotencyRecord
from ledger.services.audit import audit


def escalate(
    record: IdempotencyRecord,
    kind: EscalationKind,
    reason: str,
    *,
    actor: str,
    source: str,
    once: bool = False,
) -> bool:
    """Escalate ``record`` if it is still unknown (and, with ``once``, not escalated yet),
    audited in the caller's transaction. Whether it was escalated."""
    still = Q(pk=record.pk, state=RecordState.UNKNOWN)
    if once:
        still &= Q(escalated_at__isnull=True)
    escalated = IdempotencyRecord.objects.filter(still).update(
        escalated_at=Now(), escalation_reason=reason, escalation_kind=kind
    )
    if escalated:
        audit(
            tenant=record.tenant_id,
            actor=actor,
            action="reconcile.escalated",
            target=record,
            source=source,
            detail=reason,
            after={"kind": kind.value},
        )
    return bool(escalated)


def escalated_as(kind: EscalationKind) -> Q:
    """The records escalated for a reason of ``kind`` (a kind is read only while escalated)."""
    return Q(escalated_at__isnull=False, escalation_kind=kind)
