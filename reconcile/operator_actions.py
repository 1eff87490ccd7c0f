"""What an operator does with a call whose outcome is unknown: ask for a look-up now, or hand
it to a human. Each is a conditional update on a record still ``unknown``, audited in the same
transaction; a look-up asked for is enqueued once that transaction commits."""

from __future__ import annotations

from django.db import transaction

from ledger.domain import EscalationKind
from ledger.errors import InvalidInput, InvalidTransition
from ledger.models import AuditEvent, IdempotencyRecord
from ledger.records import escalation
from ledger.services.audit import audit
from reconcile.tasks import enqueue_reconciliation


def request_lookup(*, record: IdempotencyRecord, actor: str) -> None:
    """A human asks for a look-up now: clear the back-off and any escalation, then enqueue."""
    with transaction.atomic():
        if not escalation.look_up_again(record):
            raise InvalidTransition("only a call whose outcome is unknown can be looked up")
        audit(
            tenant=record.tenant_id,
            actor=actor,
            action="reconcile.lookup_requested",
            target=record,
            source=AuditEvent.Source.CONSOLE,
        )
        enqueue_reconciliation([record.pk])


def escalate(*, record: IdempotencyRecord, actor: str, reason: str) -> None:
    """Hand an unknown call to a human (it stops being looked up automatically)."""
    if not reason.strip():
        raise InvalidInput("escalating needs a reason")
    with transaction.atomic():
        escalated = escalation.escalate(
            record,
            EscalationKind.OPERATOR,
            reason.strip(),
            actor=actor,
            source=AuditEvent.Source.CONSOLE,
        )
        if not escalated:
            raise InvalidTransition("only a call whose outcome is unknown can be escalated")
