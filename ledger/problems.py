"""Errors as RFC 9457 ``application/problem+json`` documents."""

from __future__ import annotations

from typing import Any

from django.http import HttpResponse, JsonResponse

PROBLEM_CONTENT_TYPE = "application/problem+json"

_TITLES = {
    400: "Bad request",
    401: "Authentication required",
    403: "Forbidden",
    404: "Not found",
    405: "Method not allowed",
    409: "Conflict",
    411: "Length required",
    413: "Request body too large",
    415: "Unsupported media type",
    422: "Unprocessable request",
    500: "Internal error",
    503: "Service unavailable",
}


# What a 503's ``Retry-After`` says unless its cause says otherwise (store trouble does).
RETRY_AFTER_SECONDS = 1


def problem_body(
    status: int, code: str, detail: str, *, extra: dict[str, Any] | None = None
) -> dict[str, Any]:
    """The problem document: the body of an error answer, or one call's refusal in a batch."""
    return {
        "type": f"https://agent-ledger.invalid/problems/{code.lower().replace('_', '-')}",
        "title": _TITLES.get(status, "Error"),
        "status": status,
        "code": code,
        "detail": detail,
        **(extra or {}),
    }


def problem(
    status: int, code: str, detail: str, *, extra: dict[str, Any] | None = None
) -> HttpResponse:
    return problem_response(problem_body(status, code, detail, extra=extra))


def problem_response(body: dict[str, Any]) -> HttpResponse:
    """The error answer carrying the problem document ``body``, with its status."""
    status = body["status"]
    response = JsonResponse(body, status=status, content_type=PROBLEM_CONTENT_TYPE)
    if status == 401:
        response["WWW-Authenticate"] = 'Bearer realm="agent-ledger"'
    if status == 503:
        response["Retry-After"] = str(RETRY_AFTER_SECONDS)
    return response
