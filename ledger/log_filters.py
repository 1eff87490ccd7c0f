"""What Django logs of a request: never its query string, and API answers that are part of the
call protocol at INFO (no model imports: logging is configured before Django loads its apps)."""

from __future__ import annotations

import logging

API_PREFIX = "/api/"


class RequestWithoutQuery(logging.Filter):
    """Django logs every 4xx and 5xx answer on ``django.request`` with the request, whose
    representation is its URL, query string included. A record names it by its method and
    path only: a query string holds idempotency keys (user and business ids) and tokens, on
    the API and in the console's filters alike."""

    def filter(self, record: logging.LogRecord) -> bool:
        request = getattr(record, "request", None)
        if request is not None and not isinstance(request, str):
            record.request = f"{getattr(request, 'method', '')} {getattr(request, 'path', '')}"
        return True


class ApiClientErrorsAtInfo(logging.Filter):
    """Django logs every 4xx answer on ``django.request`` as a warning. Under the API a 4xx is
    the caller's mistake or part of the call protocol (``wait``, a stale fencing token, a
    conflict), each recorded by the ledger and the audit log; a warning per answer would bury
    the warnings that matter and make flooding the log cheap. They are logged at INFO (kept
    when ``LOG_LEVEL`` is INFO or DEBUG)."""

    def filter(self, record: logging.LogRecord) -> bool:
        request = getattr(record, "request", None)
        # The request itself, or its method and path once ``RequestWithoutQuery`` has run.
        path = (
            request.partition(" ")[2] if isinstance(request, str) else getattr(request, "path", "")
        )
        status = getattr(record, "status_code", None)
        if not path.startswith(API_PREFIX) or not isinstance(status, int):
            return True
        if status == 503:  # store trouble: logged as a warning of its own (ledger.store)
            record.levelno, record.levelname = logging.WARNING, "WARNING"
            return True
        if not 400 <= status < 500:
            return True
        record.levelno, record.levelname = logging.INFO, logging.getLevelName(logging.INFO)
        return logging.getLogger(record.name).isEnabledFor(logging.INFO)
