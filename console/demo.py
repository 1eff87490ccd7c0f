"""The demo accounts of ``make run``: a published password, so they exist only in development.

With ``DEBUG`` off a sign-in with the demo password is refused (``DemoPasswordRefusal``) and
``manage.py check --deploy`` fails while any user still has it (``check_no_demo_password``).
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.hashers import UNUSABLE_PASSWORD_PREFIX, check_password
from django.core import checks
from django.core.exceptions import PermissionDenied
from django.db import DatabaseError
from django.http import HttpRequest

DEMO_PASSWORD = "demo-ledger-2026"  # noqa: S105 - published on purpose; refused when DEBUG is off
DEMO_USERS = ["admin", "operator", "approver", "manager"]
REFUSED_REASON = "demo password refused: DEBUG is off"


class DemoPasswordRefusal:
    """An authentication backend listed before the others: with ``DEBUG`` off it stops any
    sign-in with the demo password, whoever the user is, before a password is even checked.
    It has no ``get_user``: it never signs anyone in, so no session names it."""

    def authenticate(
        self, request: HttpRequest | None, password: str | None = None, **credentials: Any
    ) -> None:
        if not settings.DEBUG and password == DEMO_PASSWORD:
            if request is not None:
                request.login_refusal = REFUSED_REASON  # type: ignore[attr-defined]
            raise PermissionDenied(REFUSED_REASON)  # Django then reports the failed sign-in
        return None


def users_with_demo_password() -> list[str]:
    """User names whose password is the demo one (checks every user with a usable password)."""
    users = get_user_model().objects.exclude(password__startswith=UNUSABLE_PASSWORD_PREFIX)
    # The hashers' own check: User.check_password would also save an upgraded hash.
    return [
        user.get_username()
        for user in users.only("password", "username").iterator()
        if check_password(DEMO_PASSWORD, user.password)
    ]


@checks.register(checks.Tags.security, deploy=True)
def check_no_demo_password(**kwargs: Any) -> list[checks.CheckMessage]:
    try:
        names = users_with_demo_password()
    except DatabaseError as exc:
        return [
            checks.Warning(
                f"Could not look for users with the demo password: {exc}",
                id="console.W001",
            )
        ]
    if not names:
        return []
    return [
        checks.Error(
            f"Users with the published demo password: {', '.join(sorted(names))}.",
            hint="Delete them (or set a new password) before serving with DEBUG off.",
            id="console.E001",
        )
    ]
