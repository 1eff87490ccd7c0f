"""Errors the services raise. Each carries a stable code and the HTTP status the API maps it to."""

from __future__ import annotations


class LedgerError(Exception):
    code = "LEDGER_ERROR"
    http_status = 400

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class InvalidTransition(LedgerError):
    """The requested state change is not in the allowed-transition table."""

    code = "INVALID_TRANSITION"
    http_status = 409


class StaleFencingToken(LedgerError):
    """A caller holding an old fencing token tried to act on a record someone else now owns."""

    code = "STALE_FENCING_TOKEN"
    http_status = 409


class LeaseExpired(LedgerError):
    """The caller's lease lapsed; its outcome is now unknown and will be reconciled."""

    code = "LEASE_EXPIRED"
    http_status = 409


class InvalidInput(LedgerError):
    code = "INVALID_INPUT"
    http_status = 422
