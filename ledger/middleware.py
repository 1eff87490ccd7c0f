"""Refuse oversized API bodies up front with a problem document (413), not a parse error."""

from __future__ import annotations

from collections.abc import Callable

from django.conf import settings
from django.http import HttpRequest, HttpResponse

from ledger.api.problems import problem


class BodySizeLimitMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
        try:
            length = int(request.META.get("CONTENT_LENGTH") or 0)
        except ValueError:
            return problem(400, "INVALID_CONTENT_LENGTH", "Content-Length is not a number.")
        if limit is not None and length > limit and request.path.startswith("/api/"):
            return problem(413, "BODY_TOO_LARGE", f"Request bodies are limited to {limit} bytes.")
        return self.get_response(request)
