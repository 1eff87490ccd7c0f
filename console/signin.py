"""Sign-ins in the audit trail: every failed, refused or throttled attempt, and every success,
on the console's login page and the admin's alike (both go through ``authenticate``)."""

from __future__ import annotations

from typing import Any

from axes.backends import AxesStandaloneBackend
from axes.exceptions import AxesBackendPermissionDenied
from django.contrib.auth.signals import user_logged_in, user_login_failed
from django.dispatch import receiver
from django.http import HttpRequest
from django.utils.translation import gettext_noop

from console.addresses import client_address
from console.denials import Reason, record_denial
from ledger.models import AuditEvent
from ledger.services.audit import audit
from ledger.stored_text import StoredText

THROTTLED = "throttled: too many failed sign-ins, locked for a while"


class ThrottledSignIn(AxesStandaloneBackend):
    """django-axes' lock-out check, first of the backends; it marks the attempts it refuses so
    the audit tells a throttled attempt from a wrong password."""

    def authenticate(self, request: HttpRequest, *args: Any, **kwargs: Any) -> None:
        try:
            super().authenticate(request, *args, **kwargs)
        except AxesBackendPermissionDenied:
            request.login_refusal = THROTTLED  # type: ignore[attr-defined]
            raise


# The sign-in events' details (shown translated; an address is filled in, or says it is unknown).
_WRONG_PASSWORD = StoredText(gettext_noop("wrong user name or password"))
_UNKNOWN_ADDRESS = StoredText(gettext_noop("unknown address"))
_LOCKED = StoredText(
    gettext_noop("sign-in refused while locked (from %(address)s)"), texts=("address",)
)
_FAILED = StoredText(gettext_noop("%(reason)s (from %(address)s)"), texts=("reason", "address"))
_FROM = StoredText(gettext_noop("from %(address)s"), texts=("address",))


def _source(request: HttpRequest | None) -> str:
    if request is not None and request.path.startswith("/admin/"):
        return AuditEvent.Source.ADMIN
    return AuditEvent.Source.CONSOLE


@receiver(user_login_failed)
def audit_failed_sign_in(
    sender: object, credentials: dict[str, Any], request: HttpRequest | None = None, **kwargs: Any
) -> None:
    # Django has already masked the password in ``credentials``; only the name is kept.
    username = str(credentials.get("username", ""))[:150]
    reason = getattr(request, "login_refusal", "") or _WRONG_PASSWORD()
    address = client_address(request) or _UNKNOWN_ADDRESS()
    if reason == THROTTLED and request is not None:
        # Counted per address: a locked-out flood is bounded like any other denial.
        record_denial(
            request,
            reason=Reason.THROTTLED,
            tenant=None,
            target=("user", username),
            detail=_LOCKED(address=address),
            actor=username or "anonymous",
            action="login.throttled",
            key=f"address:{address}",
        )
        return
    audit(
        tenant=None,
        actor=username or "anonymous",
        action="login.failed",
        target=("user", username),
        source=_source(request),
        outcome=AuditEvent.Result.DENIED,
        detail=_FAILED(reason=reason, address=address),
    )


@receiver(user_logged_in)
def audit_sign_in(sender: object, request: HttpRequest | None, user: Any, **kwargs: Any) -> None:
    audit(
        tenant=None,
        actor=user.get_username(),
        action="login.succeeded",
        target=("user", str(user.pk)),
        source=_source(request),
        detail=_FROM(address=client_address(request) or _UNKNOWN_ADDRESS()),
    )
