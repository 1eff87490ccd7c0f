"""Sign-ins in the audit trail: every failed, refused or throttled attempt, and every success,
on the console's login page and the admin's alike (both go through ``authenticate``)."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.signals import user_logged_in, user_login_failed
from django.dispatch import receiver
from django.http import HttpRequest

from ledger.models import AuditEvent
from ledger.services.audit import audit


def _source(request: HttpRequest | None) -> str:
    if request is not None and request.path.startswith("/admin/"):
        return AuditEvent.Source.ADMIN
    return AuditEvent.Source.CONSOLE


def client_address(request: HttpRequest | None) -> str:
    return request.META.get("REMOTE_ADDR", "") if request is not None else ""


@receiver(user_login_failed)
def audit_failed_sign_in(
    sender: object, credentials: dict[str, Any], request: HttpRequest | None = None, **kwargs: Any
) -> None:
    # Django has already masked the password in ``credentials``; only the name is kept.
    username = str(credentials.get("username", ""))[:150]
    reason = getattr(request, "login_refusal", "") or "wrong user name or password"
    audit(
        tenant=None,
        actor=username or "anonymous",
        action="login.failed",
        target=("user", username),
        source=_source(request),
        outcome=AuditEvent.Outcome.DENIED,
        detail=f"{reason} (from {client_address(request) or 'unknown address'})",
    )


@receiver(user_logged_in)
def audit_sign_in(sender: object, request: HttpRequest | None, user: Any, **kwargs: Any) -> None:
    audit(
        tenant=None,
        actor=user.get_username(),
        action="login.succeeded",
        target=("user", str(user.pk)),
        source=_source(request),
        detail=f"from {client_address(request) or 'unknown address'}",
    )
