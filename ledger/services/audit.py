"""Audit events: written in the same transaction as the change they describe, redacted."""

from __future__ import annotations

from typing import Any, NotRequired, TypedDict, Unpack

from django.db import models

from ledger.models import AuditEvent, Tenant
from ledger.redaction import redact, redact_text
from ledger.sql.statements import insert_returning_id


class AuditFields(TypedDict):
    """What an audit event says: who did what to which ``target`` (a model instance, or a
    (type, id) pair), from where, and what it changed."""

    tenant: Tenant | int | None
    actor: str
    action: str
    target: models.Model | tuple[str, str]
    source: str
    before: NotRequired[dict[str, Any] | None]
    after: NotRequired[dict[str, Any] | None]
    outcome: NotRequired[str]
    detail: NotRequired[str]


def audit(**fields: Unpack[AuditFields]) -> AuditEvent:
    """Append one audit event."""
    event = audit_event(**fields)
    insert_returning_id(event)
    return event


def audit_event(**fields: Unpack[AuditFields]) -> AuditEvent:
    """An unsaved audit event, for a caller that writes it in the statement of its change.
    Its before, after and detail are stored redacted (``ledger.redaction``): they hold what
    callers and operators wrote (a reason, a URL, a value changed in the admin)."""
    tenant, target = fields["tenant"], fields["target"]
    detail = fields.get("detail", "")
    if isinstance(target, tuple):
        target_type, target_id = target
    else:
        target_type, target_id = target._meta.model_name or "", str(target.pk)
    return AuditEvent(
        tenant_id=tenant.pk if isinstance(tenant, Tenant) else tenant,
        actor=fields["actor"],
        action=fields["action"],
        target_type=target_type,
        target_id=target_id,
        before=redact(fields.get("before")),
        after=redact(fields.get("after")),
        source=fields["source"],
        outcome=fields.get("outcome", AuditEvent.Result.SUCCESS),
        detail=redact_text(detail) if detail else "",
    )
