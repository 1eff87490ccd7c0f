"""Every refused request is kept as an event naming who, in which tenant, what object and why,
but at most ``CONSOLE_DENIALS_AUDITED_PER_MINUTE`` a minute per actor and log: the rest are
counted (``DenialWindow.suppressed``) and the count is written as one summary event once the
minute is over.

Where a denial is kept (``log_of``): one that happened inside the tenant the user works in (a
role they lack there, a CSRF failure while in it) is an event of that tenant's audit, and a
throttled sign-in one of the sign-in trail beside the other sign-ins; every other denial (another
tenant's object or an id that names nothing, no membership, no valid API token, an API id not
found, ``/admin/`` or ``/metrics`` refused) is a ``SecurityEvent``, which only the
installation's admins read: the tenant of a prober learns nothing from it.
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum

from django.conf import settings
from django.db import IntegrityError, transaction
from django.http import HttpRequest

from console.addresses import client_address
from console.models import DenialWindow, SecurityEvent
from ledger.calls import Caller
from ledger.clock import db_now
from ledger.models import AuditEvent, Tenant
from ledger.services.audit import audit

Log = DenialWindow.Log


class Reason(StrEnum):
    ROLE = "role"  # a role the user does not hold where they asked
    TENANT = "tenant"  # another tenant's object, or a tenant not theirs
    NOT_FOUND = "not_found"  # an id that names nothing (answered exactly as TENANT is)
    CSRF = "csrf"
    THROTTLED = "throttled"  # a sign-in while locked out
    MEMBERSHIP = "membership"  # signed in, a member of no tenant
    UNAUTHENTICATED = "unauthenticated"  # no valid bearer token (the API, /metrics)
    PERMISSION = "permission"  # a page of /admin/ (or an API operation) not permitted


#: Denials kept in the audit of the tenant they happened in, when they happened in one.
_INSIDE_A_TENANT = frozenset({Reason.ROLE, Reason.CSRF})


def log_of(reason: Reason, tenant: Tenant | int | None) -> DenialWindow.Log:
    """The log a denial is kept in: its tenant's audit for a denial inside that tenant, the
    sign-in trail (the audit, no tenant) for a throttled sign-in, the security log else."""
    if reason is Reason.THROTTLED or (reason in _INSIDE_A_TENANT and tenant is not None):
        return Log.AUDIT
    return Log.SECURITY


def actor_of(request: HttpRequest) -> str:
    """Who was refused: the signed-in user's name, an API token by its prefix, or else the
    client's address. A denial's quota is counted per actor."""
    user = getattr(request, "user", None)
    if user is not None and user.is_authenticated:
        return str(user.get_username())
    caller = getattr(request, "auth", None)  # set by the API once a token is valid
    if isinstance(caller, Caller) and caller.token is not None:
        return f"token:{caller.token.prefix}"
    return f"address:{client_address(request)}"


def source_of(request: HttpRequest) -> str:
    if request.path.startswith("/admin/"):
        return AuditEvent.Source.ADMIN
    if request.path.startswith("/api/"):
        return AuditEvent.Source.API
    return AuditEvent.Source.CONSOLE


def record_denial(
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
    """Keep one denial in the log ``log_of`` names, unless this actor's (or ``key``'s) quota
    for the minute there is used up; returns whether an event was written. ``tenant`` is the
    tenant the actor works in (None: none), never the tenant of the object asked for."""
    actor = actor or actor_of(request)
    tenant_id = tenant.pk if isinstance(tenant, Tenant) else tenant
    log = log_of(reason, tenant_id)
    if not _count(key or actor, log, tenant_id, db_now()):
        return False
    facts = {"reason": reason.value, "method": request.method, "path": request.path[:300]}
    detail = f"{reason.value}: {detail}"[:2000]
    if log is Log.AUDIT:
        audit(
            tenant=tenant_id,
            actor=actor,
            action=action,
            target=target,
            source=source_of(request),
            outcome=AuditEvent.Result.DENIED,
            after=facts,
            detail=detail,
        )
    else:
        SecurityEvent.objects.create(
            tenant_id=tenant_id,
            actor=actor,
            action=action,
            reason=reason.value,
            target_type=target[0],
            target_id=target[1],
            source=source_of(request),
            facts=facts,
            detail=detail,
        )
    return True


def _count(key: str, log: str, tenant_id: int | None, now: datetime) -> bool:
    """Count one denial in ``key``'s current minute of ``log``; True while within the quota."""
    start = now.replace(second=0, microsecond=0)
    limit = settings.CONSOLE_DENIALS_AUDITED_PER_MINUTE
    with transaction.atomic():
        window = DenialWindow.objects.select_for_update().filter(
            key=key, log=log, window_start=start
        )
        row = window.first()
        if row is None:
            _summarise_before(start)
            try:
                with transaction.atomic():
                    DenialWindow.objects.create(
                        key=key, log=log, window_start=start, audited=1, tenant_id=tenant_id
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
    """Turn every finished window into at most one summary event in its log, and drop it."""
    finished = list(
        DenialWindow.objects.select_for_update(skip_locked=True).filter(window_start__lt=start)
    )
    for row in finished:
        if not row.suppressed:
            continue
        counts = {
            "window_start": row.window_start.isoformat(),
            "audited": row.audited,
            "suppressed": row.suppressed,
        }
        detail = f"{row.suppressed} more denials in that minute were counted, not itemised"
        if row.log == Log.AUDIT:
            audit(
                tenant=row.tenant_id,
                actor=row.key,
                action="console.denied.suppressed",
                target=("denials", row.key),
                source=AuditEvent.Source.SYSTEM,
                outcome=AuditEvent.Result.DENIED,
                after=counts,
                detail=detail,
            )
        else:
            SecurityEvent.objects.create(
                tenant_id=row.tenant_id,
                actor=row.key,
                action="denied.suppressed",
                target_type="denials",
                target_id=row.key[:100],
                source=AuditEvent.Source.SYSTEM,
                facts=counts,
                detail=detail,
            )
    DenialWindow.objects.filter(pk__in=[row.pk for row in finished]).delete()
