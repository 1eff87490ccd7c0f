"""An ``unknown`` record settled from evidence: a downstream look-up, a file hash, a human
(DESIGN section 7)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.db import transaction

from ledger.domain import RecordState
from ledger.errors import InvalidTransition
from ledger.models import AuditEvent, IdempotencyRecord
from ledger.records import transitions
from ledger.records.complete import stored_classification
from ledger.records.locking import lock_record
from ledger.records.transitions import Outcome
from ledger.redaction import redact_for_storage


def resolve_unknown(
    *,
    record: IdempotencyRecord,
    outcome: Outcome,
    actor: str,
    source: str = AuditEvent.Source.API,
    result: Any = None,
    error: dict[str, Any] | None = None,
    detail: str,
) -> IdempotencyRecord:
    """Settle an ``unknown`` record from evidence: ``succeeded`` with the evidence as its
    result, or ``failed_final`` (it did not happen)."""
    _resolved(outcome)  # refused before anything is locked
    with transaction.atomic():
        locked, now = lock_record(record.pk)
        resolve_locked(
            locked,
            now=now,
            outcome=outcome,
            actor=actor,
            source=source,
            result=result,
            error=error,
            detail=detail,
        )
    return locked


def resolve_locked(
    locked: IdempotencyRecord,
    *,
    now: datetime,
    outcome: Outcome,
    actor: str,
    source: str,
    result: Any = None,
    error: dict[str, Any] | None = None,
    detail: str,
    record_changes: dict[str, Any] | None = None,
) -> None:
    """``resolve_unknown`` for a caller that already holds ``locked`` (read ``SELECT ... FOR
    UPDATE`` in its open transaction, with ``now``, the database's clock after the lock), such
    as a reconciliation worker; ``record_changes`` (other columns of the record, such as its
    look-up count) are written with it. The evidence is stored redacted by the action's data
    classification (``complete.stored_classification``)."""
    resolved = _resolved(outcome)
    succeeded = resolved.target is RecordState.SUCCEEDED
    classification = stored_classification(locked)
    transitions.run(
        resolved,
        locked,
        now=now,
        actor=actor,
        source=source,
        detail=detail,
        result=redact_for_storage(result, classification) if succeeded else None,
        error=redact_for_storage(error, classification) if error else None,
        **(record_changes or {}),
    )


def _resolved(outcome: Outcome) -> transitions.Transition:
    if outcome not in transitions.RESOLVED:
        raise InvalidTransition("resolving needs a known outcome")
    return transitions.RESOLVED[outcome]
