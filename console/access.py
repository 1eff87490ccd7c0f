"""Access rules for every console view: signed in, right method, own tenant, the right role
in that tenant."""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from typing import Any

from django.contrib.auth.views import redirect_to_login
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse, HttpResponseNotAllowed

from console.models import Membership
from console.roles import Role, has_role
from ledger.models import AuditEvent, Tenant
from ledger.services.audit import audit

TENANT_SESSION_KEY = "console_tenant_id"
View = Callable[..., HttpResponse]


def _user_id(request: HttpRequest) -> int:
    user_id = request.user.pk
    if not isinstance(user_id, int):
        raise PermissionDenied("Sign in first.")
    return user_id


def tenants_of(request: HttpRequest) -> list[Tenant]:
    return list(Tenant.objects.filter(members__user_id=_user_id(request)).order_by("slug"))


def current_tenant(request: HttpRequest) -> Tenant:
    """The tenant the user chose (kept in the session), or their first one."""
    memberships = Membership.objects.filter(user_id=_user_id(request)).select_related("tenant")
    chosen = request.session.get(TENANT_SESSION_KEY)
    membership = memberships.filter(tenant_id=chosen).first() if chosen else None
    membership = membership or memberships.order_by("tenant__slug").first()
    if membership is None:
        raise PermissionDenied("You are not a member of any tenant.")
    return membership.tenant


def _audit_denied(request: HttpRequest, view_name: str, roles: tuple[Role, ...]) -> None:
    """A refused attempt is part of the audit trail (issue 6: "including denied attempts")."""
    try:
        tenant: Tenant | None = current_tenant(request)
    except PermissionDenied:
        tenant = None
    audit(
        tenant=tenant,
        actor=request.user.get_username(),
        action="console.denied",
        target=("view", view_name),
        source=AuditEvent.Source.CONSOLE,
        outcome=AuditEvent.Outcome.DENIED,
        detail=f"{request.method} {request.path} needs {' or '.join(roles)}",
    )


def console_view(*roles: Role, methods: tuple[str, ...] = ("GET",)) -> Callable[[View], View]:
    """Sign-in, method, tenant and role checks, in that order; the view gets ``tenant``."""

    def decorate(view: View) -> View:
        @wraps(view)
        def wrapped(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
            if not request.user.is_authenticated:
                return redirect_to_login(request.get_full_path())
            if request.method not in methods:
                return HttpResponseNotAllowed(methods)
            tenant = current_tenant(request)
            if roles and not has_role(request.user, tenant, *roles):
                _audit_denied(request, view.__name__, roles)
                raise PermissionDenied("Your role in this tenant does not allow this page.")
            return view(request, *args, tenant=tenant, **kwargs)

        return wrapped

    return decorate
