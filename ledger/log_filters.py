"""Logging of API answers that are part of the call protocol (no model imports: logging is
configured before Django loads its apps)."""

from __future__ import annotations

import logging

API_PREFIX = "/api/"


class ProtocolConflictsAtInfo(logging.Filter):
    """Django logs every 4xx answer on ``django.request`` as a warning. A 409 from the API is
    part of the call protocol, not a fault: ``wait`` (the action is executing; retry after
    ``Retry-After``), a stale fencing token, a transition the record's state does not allow.
    The ledger and the audit log record each of them, and in a retry storm a warning per
    retry would bury the warnings that matter. They are logged at INFO instead (kept when
    ``LOG_LEVEL`` is INFO or DEBUG)."""

    def filter(self, record: logging.LogRecord) -> bool:
        path = getattr(getattr(record, "request", None), "path", "")
        if getattr(record, "status_code", None) != 409 or not path.startswith(API_PREFIX):
            return True
        record.levelno, record.levelname = logging.INFO, logging.getLevelName(logging.INFO)
        return logging.getLogger(record.name).isEnabledFor(logging.INFO)
