"""Trouble with the store (PostgreSQL) as the API answers it: ``503`` with ``Retry-After``.

Down, starting, restarting, read-only, out of disk, memory or connection slots (SQLSTATE class
53), a lock or statement timeout, a serialization failure, a request whose time on the
database ran out (``ledger.store_budget``), replication that is required to be synchronous and
is not (``ledger.replication``): the request changed nothing (its transaction rolled back) and
can be sent again. A client backs off and, for a tool that is not idempotent, fails closed (DESIGN
section 13). A connection that saw a fatal or read-only error is closed at once, so the next
request connects afresh instead of failing on it until it ages out.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.db import DEFAULT_DB_ALIAS, DatabaseError, InterfaceError, OperationalError, connections

from ledger import store_budget

# SQLSTATEs after which the connection is not worth keeping (class 08: connection exceptions;
# 57P0x: the server is shutting down or restarting; 25006: read-only; 53300: no slots).
_DROP_CONNECTION = ("08", "57P01", "57P02", "57P03", "25006", "53300", "57P05", "25P03")
# The store is busy, not down: a lock or statement timeout, a serialization failure or a
# deadlock. Another try soon is likely to succeed.
_BUSY = {"55P03": "lock_timeout", "57014": "statement_timeout", "40001": "serialization"}
_BUSY["40P01"] = "deadlock"
_UNAVAILABLE = {
    "25006": "read_only",
    "53300": "too_many_connections",
    "57P01": "shutting_down",
    "57P02": "crashed",
    "57P03": "starting",
    "25P03": "idle_in_transaction_timeout",
    "57P05": "idle_session_timeout",
    "53100": "disk_full",
    "53200": "out_of_memory",
    "53400": "configuration_limit_exceeded",
}
# Class 53, insufficient resources: any other of its codes is the server short of something.
_INSUFFICIENT_RESOURCES = "53"

CODE = "LEDGER_STORE_UNAVAILABLE"


class NotSynchronous(DatabaseError):
    """The ledger is configured to require synchronous replication
    (``DATABASE_REQUIRE_SYNCHRONOUS_COMMIT``) and the database's commits are not (what it
    lacks is the message): an answer it gave could be lost by a failover."""

    reason = "replication_not_synchronous"


@dataclass(frozen=True, slots=True)
class StoreTrouble:
    """What went wrong with the store, for the 503 answer."""

    reason: str
    retry_after_seconds: int
    drop_connection: bool

    @property
    def detail(self) -> str:
        if self.reason in _BUSY.values():
            return (
                f"The ledger's database is busy ({self.reason.replace('_', ' ')}). Send the "
                "request again after Retry-After, with the same key."
            )
        return (
            f"The ledger's database is unavailable ({self.reason.replace('_', ' ')}). Send the "
            "request again after Retry-After, with the same key."
        )


def store_trouble(exc: BaseException) -> StoreTrouble | None:
    """The store trouble ``exc`` is, or None for any other error (a bug, bad input)."""
    if not isinstance(exc, DatabaseError):
        return None
    if isinstance(exc, NotSynchronous):
        return StoreTrouble(NotSynchronous.reason, 5, drop_connection=False)
    sqlstate = getattr(exc.__cause__, "sqlstate", None) or getattr(exc, "sqlstate", None)
    if sqlstate is None and store_budget.spent():
        # The watchdog cut the connection: whatever the driver said about it, the request's
        # time on the database ran out.
        return StoreTrouble("database_timeout", 2, drop_connection=True)
    if sqlstate in _BUSY:
        return StoreTrouble(_BUSY[sqlstate], 1, drop_connection=False)
    if sqlstate in _UNAVAILABLE:
        drop = sqlstate.startswith(_DROP_CONNECTION)
        return StoreTrouble(_UNAVAILABLE[sqlstate], 2, drop_connection=drop)
    if sqlstate is not None and sqlstate.startswith(_INSUFFICIENT_RESOURCES):
        return StoreTrouble("insufficient_resources", 2, drop_connection=False)
    if isinstance(exc, InterfaceError | OperationalError) and (
        (sqlstate is not None and sqlstate.startswith("08"))
        or (sqlstate is None and _connection_lost())
    ):
        return StoreTrouble("unreachable", 2, drop_connection=True)
    return None


def _connection_lost() -> bool:
    """Whether the connection is closed or broken: an error without a SQLSTATE that is not
    (a misuse of a cursor, say, is a fault of the code, answered as one)."""
    raw = connections[DEFAULT_DB_ALIAS].connection
    return raw is None or bool(getattr(raw, "closed", True)) or bool(getattr(raw, "broken", False))


def forget_connection(trouble: StoreTrouble) -> None:
    """Close the connection after a fatal or read-only error; inside a transaction that still
    holds it, at the end of the request instead (Django closes a connection past its
    ``close_at``)."""
    if not trouble.drop_connection:
        return
    connection = connections[DEFAULT_DB_ALIAS]
    if connection.in_atomic_block:
        connection.close_at = 0
    else:
        connection.close()
