"""Escalation: an unknown call handed to a human (DESIGN section 7), for a reason of a kind.

A worker escalates what its look-ups cannot settle, the runtime's replay a write conflict, an
operator whatever they choose; each goes through ``escalate``. An escalated call
(``IdempotencyRecord.escalated``) is no longer looked up automatically
(``IdempotencyRecord.awaiting_lookup_q``, ``claimable_sql``) until an operator asks for a
look-up again (``look_up_again``).
"""

from __future__ import annotations

from functools import cache

from django.db.models import Q
from django.db.models.functions import Now

from ledger.domain import EscalationKind, RecordState
from ledger.models import IdempotencyRecord
from ledger.redaction import redact_text
from ledger.services.audit import audit
from ledger.sql.statements import DB_NOW, column


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
    audited in the caller's transaction; the reason is stored redacted (an operator's words,
    or a downstream's error). Whether it was escalated."""
    reason = redact_text(reason)
    still = Q(pk=record.pk, state=RecordState.UNKNOWN)
    if once:
        still &= ~IdempotencyRecord.escalated_q()
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


def look_up_again(record: IdempotencyRecord) -> bool:
    """Take ``record`` back from the humans for a look-up now (an operator's request): its
    escalation and its back-off cleared, if it is still unknown. Whether it was."""
    return bool(
        IdempotencyRecord.objects.filter(pk=record.pk, state=RecordState.UNKNOWN).update(
            next_reconcile_at=None, escalated_at=None, escalation_reason="", escalation_kind=""
        )
    )


def escalated_as(kind: EscalationKind) -> Q:
    """The records escalated for a reason of ``kind`` (a kind is read only while escalated)."""
    return IdempotencyRecord.escalated_q() & Q(escalation_kind=kind)


@cache
def claimable_sql(row: str, now: str = DB_NOW) -> str:
    """``IdempotencyRecord.awaiting_lookup_q`` over the record row named ``row`` (an alias or
    the quoted table) by the database's clock ``now`` (an SQL expression), in SQL: for a
    worker's claim, made in one hand-written statement (``reconcile.services._claim``)."""
    state, escalated_at, claim = (
        column(IdempotencyRecord, name, row)
        for name in ("state", "escalated_at", "reconcile_claimed_until")
    )
    return (
        f"({state} = '{RecordState.UNKNOWN.value}' AND {escalated_at} IS NULL "
        f"AND ({claim} IS NULL OR {claim} < {now}))"
    )
