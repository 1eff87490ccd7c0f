"""API v1: a typed JSON API with its OpenAPI document at /api/v1/openapi.json.

django-ninja gives typed request/response schemas and the OpenAPI document from one source.
Every error is ``application/problem+json`` and every status an operation can return is in
the document.
"""

from __future__ import annotations

from typing import Any

from django.db import DatabaseError
from django.http import Http404, HttpRequest, HttpResponse
from ninja import NinjaAPI
from ninja.errors import AuthenticationError, HttpError, ValidationError

from ledger import deadline
from ledger.api.auth import TokenAuth
from ledger.api.parser import StrictJSONParser
from ledger.errors import LedgerError
from ledger.middleware import store_unavailable
from ledger.problems import PROBLEM_CONTENT_TYPE, problem, problem_body, problem_response
from ledger.services.runs import RunHalted

TEXT_PATTERN = "^[^\\u0000-\\u001f\\u007f-\\u009f]*$"
_TIMEOUT_PARAMETER = {
    "name": deadline.HEADER,
    "in": "header",
    "required": False,
    "description": "How many milliseconds the caller will still wait for this answer; no "
    "action is reserved for a caller past it (503 DEADLINE_EXCEEDED).",
    "schema": {"type": "integer", "minimum": 0, "maximum": 999_999_999},
}
# Answers any operation can give: bad text in the path, query or headers; store trouble.
_EVERY_OPERATION = {
    "400": "Malformed request (nothing changed)",
    "503": "The ledger's database is unavailable or busy; retry after Retry-After",
}


def _text_only(schema: dict[str, Any]) -> None:
    """Give every string in a parameter's schema the pattern the middleware enforces."""
    if schema.get("type") == "string":
        schema.setdefault("pattern", TEXT_PATTERN)
    for option in schema.get("anyOf", []) + schema.get("oneOf", []):
        _text_only(option)


class LedgerAPI(NinjaAPI):
    """The JSON API at /api/v1/, its routers mounted by the project (``console.api``): token
    auth, the strict JSON parser and every error as problem+json."""

    def __init__(self) -> None:
        super().__init__(
            title="Agent Ledger API",
            version="1",
            description=(
                "Record every tool call before it runs and get a decision for every retry. "
                "Bodies are JSON (at most LEDGER_MAX_BODY_BYTES); strings must not contain NUL "
                "(U+0000), and NaN or Infinity are not JSON. Errors are application/problem+json."
            ),
            urls_namespace="api-v1",
            auth=TokenAuth(),
            docs_url="/docs",
            parser=StrictJSONParser(),
        )
        for exception, handler in _HANDLERS.items():
            self.add_exception_handler(exception, handler)

    def get_openapi_schema(self, *args: Any, **kwargs: Any) -> Any:
        """Error responses are documented as problem+json, as they are served."""
        schema = super().get_openapi_schema(*args, **kwargs)
        for operations in schema.get("paths", {}).values():
            for operation in operations.values():
                # Paths, queries and headers are text without control characters, or 400
                # (ledger.middleware); a caller's deadline is the one header read here.
                parameters = operation.setdefault("parameters", [])
                for parameter in parameters:
                    _text_only(parameter.get("schema", {}))
                if _TIMEOUT_PARAMETER not in parameters:
                    parameters.append(_TIMEOUT_PARAMETER)
                # One key per status (JSON objects have string keys; the YAML of the docs page
                # refuses a status written both as 400 and "400").
                operation["responses"] = {str(k): v for k, v in operation["responses"].items()}
                for status, description in _EVERY_OPERATION.items():
                    operation["responses"].setdefault(
                        status,
                        {
                            "description": description,
                            "content": {
                                PROBLEM_CONTENT_TYPE: {
                                    "schema": {"$ref": "#/components/schemas/Problem"}
                                }
                            },
                        },
                    )
                if operation.get("security"):  # a token without the operation's scope
                    operation["responses"].setdefault(
                        "403",
                        {
                            "description": "The token does not hold the scope this operation needs",
                            "content": {
                                PROBLEM_CONTENT_TYPE: {
                                    "schema": {"$ref": "#/components/schemas/Problem"}
                                }
                            },
                        },
                    )
                if "requestBody" in operation:  # the body size limit applies to every body
                    operation["responses"].setdefault(
                        "413",
                        {
                            "description": "Request body too large",
                            "content": {
                                PROBLEM_CONTENT_TYPE: {
                                    "schema": {"$ref": "#/components/schemas/Problem"}
                                }
                            },
                        },
                    )
                for status, response in operation.get("responses", {}).items():
                    content = response.get("content", {})
                    if int(status) >= 400 and "application/json" in content:
                        content[PROBLEM_CONTENT_TYPE] = content.pop("application/json")
        return schema


def refusal(exc: LedgerError | RunHalted) -> dict[str, Any]:
    """The problem document of a refusal the services raise: its status is the answer's."""
    if isinstance(exc, RunHalted):
        return problem_body(409, exc.code, str(exc), extra={"combination_id": exc.combination.pk})
    return problem_body(exc.http_status, exc.code, exc.message, extra=exc.extra)


def _refused(request: HttpRequest, exc: LedgerError | RunHalted) -> HttpResponse:
    return problem_response(refusal(exc))


def _database_error(request: HttpRequest, exc: DatabaseError) -> HttpResponse:
    """Store trouble is 503 with Retry-After (``ledger.store``); any other database error is
    a fault, raised on to be logged as one."""
    answer = store_unavailable(request, exc)
    if answer is None:
        raise exc
    return answer


def _validation_error(request: HttpRequest, exc: ValidationError) -> HttpResponse:
    errors = [
        {"loc": [str(part) for part in error.get("loc", [])], "msg": error.get("msg", "")}
        for error in exc.errors
    ]
    first = errors[0] if errors else {"loc": [], "msg": "invalid request"}
    where = ".".join(p for p in first["loc"] if p not in {"body", "payload"}) or "request"
    return problem(400, "INVALID_INPUT", f"{where}: {first['msg']}", extra={"errors": errors})


def _unauthenticated(request: HttpRequest, exc: AuthenticationError) -> HttpResponse:
    return problem(401, "UNAUTHENTICATED", "A valid bearer token for this tenant is required.")


def _http_error(request: HttpRequest, exc: HttpError) -> HttpResponse:
    if isinstance(exc.__cause__, LedgerError):  # the parser's own refusal, with its status
        return _refused(request, exc.__cause__)
    code = "INVALID_JSON" if exc.status_code == 400 else "HTTP_ERROR"
    detail = str(exc)
    if exc.__cause__ is not None:  # ninja wraps the parser's error; say what was wrong
        detail = f"{detail}: {exc.__cause__}"
    return problem(exc.status_code, code, detail)


def _not_found(request: HttpRequest, exc: Http404) -> HttpResponse:
    return problem(404, "NOT_FOUND", "No such resource.")


_HANDLERS: dict[type[Exception], Any] = {
    LedgerError: _refused,
    DatabaseError: _database_error,
    RunHalted: _refused,
    ValidationError: _validation_error,
    AuthenticationError: _unauthenticated,
    HttpError: _http_error,
    Http404: _not_found,
}
