"""Access rules for every console view: signed in, right method, own tenant, the right role
in that tenant. Every refusal is kept (``console.denials``): a role refused in the tenant's
audit, a user of no tenant and an id not the tenant's in the installation's security log."""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from typing import Any, TypeVar

from django.contrib.auth.views import redirect_to_login
from django.core.exceptions import PermissionDenied
from django.db import models
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseNotAllowed
from django.http.response import HttpResponseBase
from django.utils.cache import add_never_cache_headers
from django.utils.translation import gettext as _
from django.views.csrf import csrf_failure as django_csrf_failure

from console.denials import Reason, record_denial
from console.forbidden import refusal
from console.members import memberships_of, request_has_role
from ledger.models import Tenant
from ledger.permissions import Role

TENANT_SESSION_KEY = "console_tenant_id"
View = Callable[..., HttpResponseBase]  # a page, a redirect or a streamed export
M = TypeVar("M", bound=models.Model)


def current_tenant(request: HttpRequest) -> Tenant:
    """The tenant the user chose (kept in the session), or their first one."""
    memberships = memberships_of(request)
    chosen = request.session.get(TENANT_SESSION_KEY)
    membership = next((m for m in memberships if m.tenant_id == chosen), None) if chosen else None
    membership = membership or next(iter(memberships), None)
    if membership is None:
        raise PermissionDenied(_("You are not a member of any tenant."))
    return membership.tenant


def tenant_or_none(request: HttpRequest) -> Tenant | None:
    user = getattr(request, "user", None)
    if user is None or not user.is_authenticated:
        return None
    try:
        return current_tenant(request)
    except PermissionDenied:
        return None


def get_for_tenant(
    request: HttpRequest, tenant: Tenant, queryset: models.QuerySet[M], pk: int, missing: str
) -> M:
    """The tenant's object with this id, or 404. Another tenant's object is the same 404 as an
    id that names nothing, and both are kept in the security log (``missing_id``)."""
    return get_for_tenant_by(request, tenant, queryset, missing, pk=pk)


def get_for_tenant_by(
    request: HttpRequest, tenant: Tenant, queryset: models.QuerySet[M], missing: str, **unique: Any
) -> M:
    """``get_for_tenant`` by another unique field than the primary key (a call by its
    ``call_id``, say): the tenant's object, or 404 and a security event naming it by that
    value."""
    found = queryset.filter(tenant=tenant, **unique).first()
    if found is not None:
        return found
    missing_id(request, tenant, queryset.model, **unique)
    raise Http404(missing)


def missing_id(
    request: HttpRequest, tenant: Tenant, model: type[models.Model], **unique: Any
) -> None:
    """Keep a request for an object the tenant does not have, in the security log: another
    tenant's (a probe) or none at all. The prober's answer is the same either way and their
    tenant's audit holds neither, so nothing they can read tells the two apart."""
    foreign = model._default_manager.filter(**unique).exclude(tenant=tenant).exists()
    record_denial(
        request,
        reason=Reason.TENANT if foreign else Reason.NOT_FOUND,
        tenant=tenant,
        target=(model._meta.model_name or "", str(next(iter(unique.values())))[:100]),
        detail=f"{request.method} {request.path}: "
        + ("it belongs to another tenant" if foreign else "no such object"),
    )


def missing_ids(
    request: HttpRequest, tenant: Tenant, model: type[models.Model], ids: list[int]
) -> None:
    """``missing_id`` for each of ``ids`` (a selection naming what the tenant does not have)."""
    for pk in ids:
        missing_id(request, tenant, model, pk=pk)


def _role_denied(
    request: HttpRequest, tenant: Tenant, target: str, roles: tuple[Role, ...], kwargs: Any
) -> None:
    pk = kwargs.get("pk")
    record_denial(
        request,
        reason=Reason.ROLE,
        tenant=tenant,
        target=(target, str(pk)) if target and pk is not None else ("page", request.path[:100]),
        detail=f"{request.method} {request.path} needs {' or '.join(roles)} in this tenant",
    )


def console_view(
    *roles: Role,
    methods: tuple[str, ...] = ("GET",),
    target: str = "",
    export: bool | None = None,
) -> Callable[[View], View]:
    """Sign-in, method, tenant and role checks, in that order; the view gets ``tenant``.
    ``target`` names the model of the view's ``pk``, so a denial names the object. A list's
    view says with ``export`` whether it also answers ``format=csv`` (``console.csv_export``);
    every list says one or the other, and the tenant-scope test exports each that does."""

    def decorate(view: View) -> View:
        @wraps(view)
        def wrapped(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponseBase:
            if not request.user.is_authenticated:
                return redirect_to_login(request.get_full_path())
            if request.method not in methods:
                return HttpResponseNotAllowed(methods)
            try:
                tenant = current_tenant(request)
            except PermissionDenied as exc:
                record_denial(
                    request,
                    reason=Reason.MEMBERSHIP,
                    tenant=None,
                    target=("page", request.path[:100]),
                    detail=f"{request.method} {request.path}: a member of no tenant",
                )
                response: HttpResponseBase = refusal(request, tenant=None, message=str(exc))
            else:
                if roles and not request_has_role(request, tenant, *roles):
                    _role_denied(request, tenant, target, roles, kwargs)
                    response = refusal(request, tenant=tenant, needed=roles)
                else:
                    response = view(request, *args, tenant=tenant, **kwargs)
            # Every console page shows a tenant's evidence (diffs, results, audit): no copy of
            # it may stay in a browser's or proxy's cache.
            add_never_cache_headers(response)
            return response

        wrapped.console_roles = roles  # type: ignore[attr-defined]  # read by console.navigation
        # Read by the tenant-scope tests, to find each object page's model and each export.
        wrapped.console_methods = methods  # type: ignore[attr-defined]
        wrapped.console_target = target  # type: ignore[attr-defined]
        wrapped.console_export = export  # type: ignore[attr-defined]
        return wrapped

    return decorate


def csrf_failure(request: HttpRequest, reason: str = "", **kwargs: Any) -> HttpResponse:
    """Django's CSRF failure page, after keeping the refused request."""
    record_denial(
        request,
        reason=Reason.CSRF,
        tenant=tenant_or_none(request),
        target=("page", request.path[:100]),
        detail=f"{request.method} {request.path}: {reason}",
    )
    return django_csrf_failure(request, reason=reason)
