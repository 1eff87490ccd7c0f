"""Logging of API answers that are part of the call protocol (no model imports: logging is
configured before Django loads its apps)."""

from __future__ import annotations

import logging

API_PREFIX = "/api/"


class ApiClientErrorsAtInfo(logging.Filter):
    """Django logs every 4xx answer on ``django.request`` as a warning, with the request
    (its URL, query string included). Under the API a 4xx is the caller's mistake or part of
    the call protocol (``wait``, a stale fencing token, a conflict), each recorded by the
    ledger and the audit log; a warning per answer would bury the warnings that matter and
    make flooding the log cheap. They are logged at INFO (kept when ``LOG_LEVEL`` is INFO or
    DEBUG), with the method and path only: a query string holds idempotency keys, which hold
    user and business ids."""

    def filter(self, record: logging.LogRecord) -> bool:
        request = getattr(record, "request", None)
        path = getattr(request, "path", "")
        status = getattr(record, "status_code", None)
        if not path.startswith(API_PREFIX) or not isinstance(status, int):
            return True
        record.request = f"{getattr(request, 'method', '')} {path}"
        if status == 503:  # store trouble: logged as a warning of its own (ledger.store)
            record.levelno, record.levelname = logging.WARNING, "WARNING"
            return True
        if not 400 <= status < 500:
            return True
        record.levelno, record.levelname = logging.INFO, logging.getLevelName(logging.INFO)
        return logging.getLogger(record.name).isEnabledFor(logging.INFO)
