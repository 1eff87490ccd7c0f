"""Project error pages: API paths get problem+json, everything else Django's HTML pages."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.views import defaults

from ledger.problems import problem


def not_found(request: HttpRequest, exception: Exception) -> HttpResponse:
    if request.path.startswith("/api/"):
        return problem(404, "NOT_FOUND", "No such resource.")
    return defaults.page_not_found(request, exception)


def server_error(request: HttpRequest) -> HttpResponse:
    if request.path.startswith("/api/"):
        return problem(500, "INTERNAL_ERROR", "The ledger failed to handle this request.")
    return defaults.server_error(request)
