"""Errors the services raise. Each carries a stable code and the HTTP status the API maps it to."""

from __future__ import annotations

from typing import Any


class LedgerError(Exception):
    code = "LEDGER_ERROR"
    http_status = 400

    def __init__(self, message: str, *, extra: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.message = message
        # More members of the problem document (the record's state, the model's observation).
        self.extra: dict[str, Any] = extra or {}


class InvalidTransition(LedgerError):
    """The requested state change is not in the allowed-transition table."""

    code = "INVALID_TRANSITION"
    http_status = 409


class StaleFencingToken(LedgerError):
    """A caller holding an old fencing token tried to act on a record someone else now owns."""

    code = "STALE_FENCING_TOKEN"
    http_status = 409


class RecordSettled(LedgerError):
    """A report for a record whose outcome was already found otherwise (a look-up, a human)."""

    code = "RECORD_SETTLED"
    http_status = 409


class ResultConflict(LedgerError):
    """A second report of one call with a different result: the recorded result stands."""

    code = "RESULT_CONFLICT"
    http_status = 409


class LeaseExpired(LedgerError):
    """The caller's lease lapsed; its outcome is now unknown and will be reconciled."""

    code = "LEASE_EXPIRED"
    http_status = 409


class InvalidInput(LedgerError):
    """The request is malformed or refers to something that cannot be used; nothing changed."""

    code = "INVALID_INPUT"
    http_status = 400


class InvalidWritePlan(LedgerError):
    """A write plan whose path cannot name a file inside its workspace; nothing changed."""

    code = "INVALID_WRITE_PLAN"
    http_status = 422


class Forbidden(LedgerError):
    """The caller is known but may not do this (a token without the scope it needs)."""

    code = "FORBIDDEN"
    http_status = 403


class InputMismatch(LedgerError):
    """A replay or a start named another input than the recorded action's."""

    code = "IDEMPOTENCY_KEY_CONFLICT"
    http_status = 422


class Conflict(LedgerError):
    """The request is well-formed but contradicts itself or the stored state."""

    code = "CONFLICT"
    http_status = 409


class NotFound(LedgerError):
    """No such object for this tenant (another tenant's objects are not found either)."""

    code = "NOT_FOUND"
    http_status = 404


class RunNotRunning(LedgerError):
    """The run has finished; a finished run takes no more calls."""

    code = "RUN_FINISHED"
    http_status = 409


class ApprovalError(LedgerError):
    """An approval cannot be given, used or refused in its current state."""

    code = "APPROVAL_INVALID"
    http_status = 409
