"""The API's refusals kept as denials (``console.denials``), in the installation's security log:
a 401 (no valid token: counted per client address), a 403 and a 404 (counted per token, or per
address without one). A 404 is kept whether or not its id is another tenant's: the API answers
both alike, and the caller's tenant reads neither.

A middleware rather than a part of ``ledger.api`` because the log is the console's, and because
it reads only the answer: a successful request costs it no statement (the hot path's budget,
``tests/api/test_statement_budget.py``), and the token check is left as it is.
"""

from __future__ import annotations

from collections.abc import Callable

from django.db import DatabaseError
from django.http import HttpRequest, HttpResponse

from console.denials import Reason, record_denial
from ledger.api.calls import refused_in_batch
from ledger.calls import Caller
from ledger.middleware import API_PREFIX, store_unavailable

#: The answers that refuse the caller, and why.
DENIED = {401: Reason.UNAUTHENTICATED, 403: Reason.PERMISSION, 404: Reason.NOT_FOUND}


class ApiDenialMiddleware:
    """Keeps every refusal under ``/api/`` once the answer is made, whatever made it (the
    token check, a view, the API's own 404 for a path it does not have)."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        if not request.path.startswith(API_PREFIX):
            return response
        # The answer's own status, and each refused call of a batch (answered 200 as a whole).
        answered = [(response.status_code, "answered")] + [
            (status, f"call {n} of its batch answered")
            for n, status in enumerate(refused_in_batch(request))
        ]
        denied = [
            (DENIED[status], f"{said} {status}") for status, said in answered if status in DENIED
        ]
        if not denied:
            return response
        caller = getattr(request, "auth", None)
        tenant = caller.tenant if isinstance(caller, Caller) else None
        try:
            for reason, said in denied:
                record_denial(
                    request,
                    reason=reason,
                    tenant=tenant,
                    target=("path", request.path[:100]),
                    detail=f"{request.method} {request.path}: {said}",
                    action="api.denied",
                )
        except DatabaseError as exc:  # store trouble: the answer is a 503, as for any request
            answer = store_unavailable(request, exc)
            if answer is None:
                raise
            return answer
        return response
