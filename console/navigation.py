"""Which console pages a user's roles open, read from the roles each view's ``console_view``
names, so the top bar and the inbox tiles link only to pages the user may see and the rule
stays in one place (the view's decorator)."""

from __future__ import annotations

from functools import cache

from django.http import HttpRequest
from django.urls import resolve, reverse

from console.members import request_roles, tenants_of
from ledger.models import Tenant
from ledger.permissions import Role, allows

#: The pages the top bar and the inbox link to (URL names in the ``console`` namespace).
LINKED_PAGES = (
    "approvals",
    "unknown_calls",
    "combinations",
    "metrics",
    "calls",
    "runs",
    "tools",
    "audit",
    "tokens",
)
#: The pages of one object each (a ``pk`` in their URL) that ids link to across the console.
OBJECT_PAGES = (
    "approval",
    "unknown_call",
    "call",
    "run",
    "record",
    "record_compensation",
    "combination",
    "audit_event",
)


@cache
def needed_roles(url_name: str) -> tuple[Role, ...]:
    """The roles the console page ``url_name`` is open to; none: any member. The URLconf is
    read once per page and process: every page asks for all of them (``pages_for``)."""
    kwargs = {"pk": 1} if url_name in OBJECT_PAGES else None
    view = resolve(reverse(f"console:{url_name}", kwargs=kwargs)).func
    return tuple(getattr(view, "console_roles", ()))


def pages_for(roles: set[Role]) -> set[str]:
    """The linked and object pages a member holding ``roles`` may open (for a member without
    one, those open to any member)."""
    return {name for name in LINKED_PAGES + OBJECT_PAGES if allows(roles, needed_roles(name))}


def context_for(request: HttpRequest, tenant: Tenant, **extra: object) -> dict[str, object]:
    """What every console page's layout needs: the tenant, the user's roles there and the
    pages those roles open (the top bar links only to those)."""
    roles = request_roles(request, tenant)
    return {
        "tenant": tenant,
        "tenants": tenants_of(request),
        "roles": {r.value for r in roles},
        "pages": pages_for(roles),
        **extra,
    }
