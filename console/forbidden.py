"""The console's refusal page: a 403 in the console's own layout and the user's language that
says which role the page needs and who holds it in the tenant, so the user knows whom to ask.

A refusal is an ordinary answer, audited by ``console.access``: it is returned, not raised, so
Django logs one line for it rather than a traceback.
"""

from __future__ import annotations

from django.db.models import Q
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from console.navigation import context_for
from console.templatetags.terms import term
from ledger.models import Membership, Tenant
from ledger.permissions import Role


def holders(tenant: Tenant, needed: tuple[Role, ...]) -> list[str]:
    """User names of the tenant's members who may open a page open to ``needed``."""
    members = Membership.objects.filter(tenant=tenant).filter(
        Q(role__in=[*needed, Role.ADMIN]) | Q(user__is_superuser=True)
    )
    return sorted(members.values_list("user__username", flat=True).distinct()[:20])


def refusal(
    request: HttpRequest,
    *,
    tenant: Tenant | None,
    needed: tuple[Role, ...] = (),
    message: str = "",
) -> HttpResponse:
    """The 403 page: ``needed`` names the roles the page is open to, ``message`` any other
    reason (already translated)."""
    context: dict[str, object] = {"needed": [term(r.value) for r in needed], "message": message}
    if tenant is not None:
        context = context_for(request, tenant, holders=holders(tenant, needed), **context)
    return render(request, "console/forbidden.html", context, status=403)
