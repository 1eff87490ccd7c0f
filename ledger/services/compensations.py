"""What the API and the console show of a compensation (docs/compensation.md): the record it
runs as, and the links between a compensated action and its compensation."""

from __future__ import annotations

from typing import Any

from ledger.compensation import compensation_state
from ledger.models import Compensation, IdempotencyRecord


def compensation_record(compensation: Compensation) -> IdempotencyRecord | None:
    return (
        IdempotencyRecord.objects.select_related("tool")
        .filter(tenant_id=compensation.tenant_id, key=compensation.key)
        .first()
    )


def compensation_view(record: IdempotencyRecord) -> dict[str, Any] | None:
    """What a record page or the API shows of compensation: for a compensated action its
    compensation's key and state (``compensated`` once it succeeded); for a compensation the
    action it undoes."""
    compensation = Compensation.objects.filter(original=record).first()
    if compensation is not None:
        comp_record = compensation_record(compensation)
        return {
            "role": "compensated_by",
            "key": compensation.key,
            "record_id": comp_record.pk if comp_record else None,
            "state": compensation_state(comp_record.state if comp_record else None),
        }
    undone = (
        Compensation.objects.select_related("original")
        .filter(tenant_id=record.tenant_id, key=record.key)
        .first()
    )
    if undone is not None:
        return {
            "role": "compensates",
            "key": undone.original.key,
            "record_id": undone.original_id,
            "state": undone.original.state,
        }
    return None
