"""A console session ends after ``SESSION_IDLE_MINUTES`` without activity. A page's own polling
(the inbox's, a live page's: marked ``X-Console-Poll``) is not activity, so an unattended
screen still times out.
Times are the database's (``ledger.clock``), so web processes with skewed clocks agree."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.contrib.auth import logout
from django.contrib.auth.signals import user_logged_in
from django.contrib.auth.views import redirect_to_login
from django.dispatch import receiver
from django.http import HttpRequest, HttpResponse

from ledger.clock import db_now
from ledger.models import AuditEvent
from ledger.services.audit import audit

LAST_ACTIVITY = "console_last_activity"
POLL_HEADER = "X-Console-Poll"
# The stored time is refreshed at most this often, so a busy user costs no session write a request.
RESOLUTION_SECONDS = 60


def _now() -> int:
    return int(db_now().timestamp())


def polled(request: HttpRequest) -> bool:
    """Whether ``request`` is a page polling itself (``POLL_HEADER``), not the user."""
    return request.headers.get(POLL_HEADER) == "true"


@receiver(user_logged_in)
def start_idle_clock(sender: object, request: HttpRequest | None, **kwargs: Any) -> None:
    """Signing in is activity: the clock starts with the session."""
    if request is not None and hasattr(request, "session"):
        request.session[LAST_ACTIVITY] = _now()


class IdleTimeoutMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        user = getattr(request, "user", None)
        if user is None or not user.is_authenticated:
            return self.get_response(request)
        now = _now()
        last = request.session.get(LAST_ACTIVITY)
        if isinstance(last, int) and now - last > settings.SESSION_IDLE_MINUTES * 60:
            username = user.get_username()
            logout(request)
            audit(
                tenant=None,
                actor=username,
                action="session.expired",
                target=("user", str(user.pk)),
                source=AuditEvent.Source.CONSOLE,
                detail=f"idle for {(now - last) // 60} minutes",
            )
            if request.headers.get("HX-Request"):
                # htmx follows this header with a full page load instead of swapping a fragment.
                return HttpResponse(status=204, headers={"HX-Redirect": settings.LOGIN_URL})
            return redirect_to_login(request.get_full_path())
        if not polled(request) and (not isinstance(last, int) or now - last >= RESOLUTION_SECONDS):
            request.session[LAST_ACTIVITY] = now
        return self.get_response(request)
