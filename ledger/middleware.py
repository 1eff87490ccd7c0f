"""What the API refuses before a view runs, and how it answers what no view answers.

Under ``/api/``: oversized bodies (413), control characters or invalid UTF-8 in the path,
the query or a header (400), a body that is not JSON (415), a chunked body without a length
(411), a bad ``X-Ledger-Timeout-Ms`` (400); 404 and 405 as problem+json. Everywhere: a
request's time on the database is bounded (``ledger.store_budget``), and trouble with the
database is 503 with ``Retry-After`` (``ledger.store``), never a 500.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterator
from typing import cast
from urllib.parse import unquote_to_bytes

from django.conf import settings
from django.http import FileResponse, HttpRequest, HttpResponse, StreamingHttpResponse
from django.http.response import HttpResponseBase

from ledger import deadline, store_budget
from ledger.problems import PROBLEM_CONTENT_TYPE, problem, problem_body, problem_response
from ledger.store import CODE as STORE_CODE
from ledger.store import forget_connection, store_trouble

API_PREFIX = "/api/"
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
_JSON_TYPE = re.compile(r"^application/([a-z0-9.+-]+\+)?json$")
_BODY_METHODS = {"POST", "PUT", "PATCH"}

logger = logging.getLogger(__name__)


def _bad_text(raw: str) -> bool:
    """Whether percent-decoded ``raw`` holds a control character or is not UTF-8."""
    try:
        # WSGI hands the bytes as sent in a latin-1 string: back to bytes, then decode.
        sent = raw.replace("+", " ").encode("latin-1", errors="replace")
        text = unquote_to_bytes(sent).decode("utf-8")
    except UnicodeDecodeError:
        return True
    return bool(_CONTROL.search(text))


def _refusal(request: HttpRequest) -> HttpResponse | None:
    """The answer to an API request refused before its view, or None to let it through."""
    meta = request.META
    raw_uri = meta.get("RAW_URI") or meta.get("REQUEST_URI")  # as sent, where the server says
    if _CONTROL.search(request.path) or (raw_uri and _bad_text(raw_uri.split("?", 1)[0])):
        return problem(400, "INVALID_INPUT", "The path must be UTF-8 without control characters.")
    if _bad_text(meta.get("QUERY_STRING", "")):
        return problem(
            400, "INVALID_INPUT", "The query string must be UTF-8 without control characters."
        )
    for name, value in meta.items():
        if name.startswith("HTTP_") and isinstance(value, str) and "\x00" in value:
            return problem(400, "INVALID_INPUT", "Headers must not contain NUL characters.")
    try:
        length = int(meta.get("CONTENT_LENGTH") or 0)
    except ValueError:
        return problem(400, "INVALID_CONTENT_LENGTH", "Content-Length is not a number.")
    limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
    if limit is not None and length > limit:
        return problem(413, "BODY_TOO_LARGE", f"Request bodies are limited to {limit} bytes.")
    if request.method in _BODY_METHODS:
        chunked = "chunked" in meta.get("HTTP_TRANSFER_ENCODING", "").lower()
        if chunked and not meta.get("CONTENT_LENGTH"):
            return problem(
                411, "LENGTH_REQUIRED", "Send the body with a Content-Length, not chunked."
            )
        content_type = (request.content_type or "").lower()
        if (length or chunked) and not _JSON_TYPE.match(content_type):
            return problem(
                415, "UNSUPPORTED_MEDIA_TYPE", "Request bodies must be application/json."
            )
    return None


class ApiRequestMiddleware:
    """Refuses hostile or malformed API requests, sets the caller's deadline, and answers
    404/405 under ``/api/`` as problem+json."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if not request.path.startswith(API_PREFIX):
            return self.get_response(request)
        refused = _refusal(request)
        if refused is not None:
            return refused
        raw_timeout = request.META.get(deadline.META_KEY)
        try:
            budget = deadline.parse(raw_timeout) if raw_timeout is not None else None
        except ValueError as exc:
            return problem(400, "INVALID_INPUT", str(exc))
        token = deadline.start(budget)
        try:
            response = self.get_response(request)
        finally:
            deadline.reset(token)
        if response.status_code in (404, 405) and not response.get("Content-Type", "").startswith(
            (PROBLEM_CONTENT_TYPE, "application/json")
        ):
            if response.status_code == 405:
                allowed = response.get("Allow", "")
                answer = problem(
                    405, "METHOD_NOT_ALLOWED", f"{request.method} is not allowed here ({allowed})."
                )
                answer["Allow"] = allowed
                return answer
            return problem(404, "NOT_FOUND", "No such resource.")
        return response


class StoreBudgetMiddleware:
    """Runs each request within ``DATABASE_REQUEST_BUDGET_MS`` of database time, and each
    piece of a streamed response within a budget as long (``ledger.store_budget``)."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponseBase:
        seconds = settings.DATABASE_REQUEST_BUDGET_MS / 1000
        with store_budget.bounded(seconds):
            response: HttpResponseBase = self.get_response(request)
        # A file (a static one) is read from disk, not from the database: left to the server's
        # file wrapper.
        if (
            isinstance(response, StreamingHttpResponse)
            and not response.is_async
            and not isinstance(response, FileResponse)
        ):
            response.streaming_content = store_budget.each_bounded(
                iter(cast(Iterator[bytes], response.streaming_content)), seconds
            )
        return response


class StoreTroubleMiddleware:
    """Database trouble escaping a view is ``503`` with ``Retry-After``: problem+json under
    ``/api/``, a short text page elsewhere."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        return self.get_response(request)

    def process_exception(self, request: HttpRequest, exc: Exception) -> HttpResponse | None:
        return store_unavailable(request, exc)


def store_unavailable(request: HttpRequest, exc: BaseException) -> HttpResponse | None:
    """The 503 answer for store trouble ``exc`` (None for any other error)."""
    refusal = store_refusal(request, exc)
    if refusal is None:
        return None
    body, retry_after = refusal
    if request.path.startswith(API_PREFIX):
        response = problem_response(body)
    else:
        response = HttpResponse(body["detail"], status=503, content_type="text/plain")
    response["Retry-After"] = str(retry_after)
    return response


def store_refusal(request: HttpRequest, exc: BaseException) -> tuple[dict, int] | None:
    """For store trouble ``exc`` (None for any other error): the 503 problem document and the
    seconds to wait before trying again. The trouble is logged and a broken connection
    forgotten."""
    trouble = store_trouble(exc)
    if trouble is None:
        return None
    forget_connection(trouble)
    logger.warning(
        "store unavailable",
        extra={
            "reason": trouble.reason,
            "sqlstate": getattr(exc.__cause__, "sqlstate", None),
            "error": type(exc.__cause__ or exc).__name__,
            "path": request.path,
        },
    )
    body = problem_body(503, STORE_CODE, trouble.detail, extra={"reason": trouble.reason})
    return body, trouble.retry_after_seconds
