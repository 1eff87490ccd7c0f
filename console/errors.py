"""Project error pages: API paths get problem+json, everything else HTML pages (a refusal in
the console's own layout)."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.views import defaults

from console.access import tenant_or_none
from console.denials import Reason, record_denial
from console.forbidden import refusal
from ledger.problems import problem


def permission_denied(request: HttpRequest, exception: Exception) -> HttpResponse:
    """A refusal raised outside ``console_view`` (which answers its own refusals). One of
    ``/admin/`` is kept in the security log here; the API's are kept by
    ``console.api_denials``, and the console's own raise only what their service audited."""
    if request.path.startswith("/api/"):
        return problem(403, "FORBIDDEN", "Not allowed.")
    tenant = tenant_or_none(request)
    if request.path.startswith("/admin/"):
        record_denial(
            request,
            reason=Reason.PERMISSION,
            tenant=tenant,
            target=("page", request.path[:100]),
            detail=f"{request.method} {request.path}: {exception or 'not permitted'}",
        )
    return refusal(request, tenant=tenant, message=str(exception))


def not_found(request: HttpRequest, exception: Exception) -> HttpResponse:
    if request.path.startswith("/api/"):
        return problem(404, "NOT_FOUND", "No such resource.")
    return defaults.page_not_found(request, exception)


def server_error(request: HttpRequest) -> HttpResponse:
    if request.path.startswith("/api/"):
        return problem(500, "INTERNAL_ERROR", "The ledger failed to handle this request.")
    return defaults.server_error(request)
