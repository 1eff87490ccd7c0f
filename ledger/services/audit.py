"""Audit events: written in the same transaction as the change they describe."""

from __future__ import annotations

from typing import Any

from django.db import models

from ledger.models import AuditEvent, Tenant
from ledger.services.statements import insert_returning_id


def audit(
    *,
    tenant: Tenant | int | None,
    actor: str,
    action: str,
    target: models.Model | tuple[str, str],
    source: str,
    before: dict[str, Any] | None = None,
    after: dict[str, Any] | None = None,
    outcome: str = AuditEvent.Outcome.SUCCESS,
    detail: str = "",
) -> AuditEvent:
    """Append one audit event about ``target`` (a model instance, or a (type, id) pair)."""
    event = audit_event(
        tenant=tenant,
        actor=actor,
        action=action,
        target=target,
        source=source,
        before=before,
        after=after,
        outcome=outcome,
        detail=detail,
    )
    insert_returning_id(event)
    return event


def audit_event(
    *,
    tenant: Tenant | int | None,
    actor: str,
    action: str,
    target: models.Model | tuple[str, str],
    source: str,
    before: dict[str, Any] | None = None,
    after: dict[str, Any] | None = None,
    outcome: str = AuditEvent.Outcome.SUCCESS,
    detail: str = "",
) -> AuditEvent:
    """An unsaved audit event, for a caller that writes it in the statement of its change."""
    tenant_id = tenant.pk if isinstance(tenant, Tenant) else tenant
    if isinstance(target, tuple):
        target_type, target_id = target
    else:
        target_type, target_id = target._meta.model_name or "", str(target.pk)
    return AuditEvent(
        tenant_id=tenant_id,
        actor=actor,
        action=action,
        target_type=target_type,
        target_id=target_id,
        before=before,
        after=after,
        source=source,
        outcome=outcome,
        detail=detail,
    )
