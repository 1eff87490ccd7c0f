"""Every refused console request is an audit event naming who, in which tenant, what object
and why (role, tenant, CSRF, throttled), but at most ``CONSOLE_DENIALS_AUDITED_PER_MINUTE`` a
minute per actor: the rest are counted (``DenialWindow.suppressed``) and the count is written
as one ``console.denied.suppressed`` event once the minute is over."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum

from django.conf import settings
from django.db import IntegrityError, transaction
from django.http import HttpRequest

from console.models import DenialWindow
from ledger.clock import db_now
from ledger.models import AuditEvent, Tenant
from ledger.services.audit import audit


class Reason(StrEnum):
    ROLE = "role"
    TENANT = "tenant"
    CSRF = "csrf"
    THROTTLED = "throttled"


def actor_of(request: HttpRequest) -> str:
    user = getattr(request, "user", None)
    if user is not None and user.is_authenticated:
        return str(user.get_username())
    return f"anonymous@{request.META.get('REMOTE_ADDR', '')}"


def audit_denial(
    request: HttpRequest,
    *,
    reason: Reason,
    tenant: Tenant | int | None,
    target: tuple[str, str],
    detail: str,
    actor: str | None = None,
    action: str = "console.denied",
    key: str | None = None,
) -> bool:
    """Audit one denial unless this actor's (or ``key``'s) quota for the minute is used up;
    returns whether an event was written."""
    actor = actor or actor_of(request)
    tenant_id = tenant.pk if isinstance(tenant, Tenant) else tenant
    if not _count(key or actor, tenant_id, db_now()):
        return False
    audit(
        tenant=tenant_id,
        actor=actor,
        action=action,
        target=target,
        source=AuditEvent.Source.ADMIN
        if request.path.startswith("/admin/")
        else AuditEvent.Source.CONSOLE,
        outcome=AuditEvent.Outcome.DENIED,
        after={"reason": reason.value, "method": request.method, "path": request.path[:300]},
        detail=f"{reason.value}: {detail}"[:2000],
    )
    return True


def _count(key: str, tenant_id: int | None, now: datetime) -> bool:
    """Count one denial in ``key``'s current minute; True while it is within the quota."""
    start = now.replace(second=0, microsecond=0)
    limit = settings.CONSOLE_DENIALS_AUDITED_PER_MINUTE
    with transaction.atomic():
        window = DenialWindow.objects.select_for_update().filter(key=key, window_start=start)
        row = window.first()
        if row is None:
            _summarise_before(start)
            try:
                with transaction.atomic():
                    DenialWindow.objects.create(
                        key=key, window_start=start, audited=1, tenant_id=tenant_id
                    )
                return True
            except IntegrityError:  # a concurrent denial of the same key created it
                row = window.get()
        if row.audited < limit:
            window.update(audited=row.audited + 1)
            return True
        window.update(suppressed=row.suppressed + 1)
        return False


def _summarise_before(start: datetime) -> None:
    """Turn every finished window into at most one summary event, and drop it."""
    finished = list(
        DenialWindow.objects.select_for_update(skip_locked=True).filter(window_start__lt=start)
    )
    for row in finished:
        if row.suppressed:
            audit(
                tenant=row.tenant_id,
                actor=row.key,
                action="console.denied.suppressed",
                target=("denials", row.key),
                source=AuditEvent.Source.SYSTEM,
                outcome=AuditEvent.Outcome.DENIED,
                after={
                    "window_start": row.window_start.isoformat(),
                    "audited": row.audited,
                    "suppressed": row.suppressed,
                },
                detail=f"{row.suppressed} more denials in that minute were counted, not itemised",
            )
    DenialWindow.objects.filter(pk__in=[row.pk for row in finished]).delete()
