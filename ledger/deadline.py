"""The caller's deadline: no reservation is made for a caller who has already given up.

A client sends ``X-Ledger-Timeout-Ms`` (how long it will still wait for this answer). The
deadline is measured from when the request reached the web process, on that process's
monotonic clock: a duration, so no two clocks are compared. Services call ``check()`` right
before the statement that would reserve or start an action.
"""

from __future__ import annotations

import time
from contextvars import ContextVar

from ledger.errors import LedgerError

HEADER = "X-Ledger-Timeout-Ms"
META_KEY = "HTTP_X_LEDGER_TIMEOUT_MS"
# A budget longer than this is taken as this long: no request should wait longer anyway.
MAX_TIMEOUT_MS = 600_000

_deadline: ContextVar[float | None] = ContextVar("ledger_deadline", default=None)


class DeadlineExceeded(LedgerError):
    """The caller's own timeout has passed: it is no longer waiting for the answer."""

    code = "DEADLINE_EXCEEDED"
    http_status = 503


def parse(raw: str) -> float:
    """The budget in seconds from the header's value (a whole number of milliseconds)."""
    value = raw.strip()
    if not value.isdigit() or len(value) > 9:
        raise ValueError(f"{HEADER} must be a whole number of milliseconds")
    return min(int(value), MAX_TIMEOUT_MS) / 1000


def start(budget_seconds: float | None) -> object:
    """Set this request's deadline (None: no deadline); returns the token for ``reset``."""
    deadline = None if budget_seconds is None else time.monotonic() + budget_seconds
    return _deadline.set(deadline)


def reset(token: object) -> None:
    _deadline.reset(token)  # type: ignore[arg-type]


def check() -> None:
    """Raise ``DeadlineExceeded`` when the caller's deadline has passed."""
    deadline = _deadline.get()
    if deadline is not None and time.monotonic() >= deadline:
        raise DeadlineExceeded(
            "the caller's timeout (X-Ledger-Timeout-Ms) passed before the action was reserved; "
            "nothing was reserved or changed"
        )
