"""A request's time on the database, bounded by the service itself.

PostgreSQL's own timeouts do not bound every wait. A commit waiting for a synchronous standby
ignores ``statement_timeout``, and cancelling it (``pg_cancel_backend``, libpq's cancel) makes
PostgreSQL keep the commit with only a WARNING: the caller would be told "done" about a
transaction that no standby has, which a failover then loses. A network that stalls without
closing (a partition, a stuck proxy) holds a read for as long as TCP keepalives allow, since
the data sent was acknowledged (libpq's ``tcp_user_timeout`` does not fire either).

So each request runs inside a budget, shorter than the web server's worker timeout
(docs/deploy.md). A watchdog thread, one per process, shuts down the database socket of a
request still running when its budget runs out, and keeps doing so while it runs on: the
request's driver sees a lost connection at once, its transaction is rolled back (or, for a
commit, left to the server, never reported as done), and the request is answered 503
``database_timeout`` with ``Retry-After`` (``ledger.store``). Only the socket is shut down,
never closed: the request's own thread closes the connection, so no file descriptor is
reused under it.
"""

from __future__ import annotations

import contextlib
import os
import socket
import threading
import time
from collections.abc import Iterator
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

from django.db import DEFAULT_DB_ALIAS, connections

#: How often a request past its budget has whatever connection it holds cut again.
RECUT_SECONDS = 0.5


@dataclass(eq=False)
class Budget:
    """One bounded stretch of a request: its deadline (monotonic) and the connection it uses."""

    deadline: float
    database: Any  # a Django DatabaseWrapper: its ``connection`` is the driver's connection
    cut: bool = False
    next_check: float = field(init=False)

    def __post_init__(self) -> None:
        self.next_check = self.deadline


_current: ContextVar[Budget | None] = ContextVar("ledger_store_budget", default=None)


class _Watchdog:
    """The thread that cuts the connections of budgets past their deadline."""

    def __init__(self) -> None:
        self._armed: set[Budget] = set()
        self._wake = threading.Condition()
        self._owner_pid = 0  # the process the thread was started in (gunicorn forks workers)
        self._sleeps_until = 0.0  # when the thread wakes next by itself

    def arm(self, budget: Budget) -> None:
        with self._wake:
            if self._owner_pid != os.getpid():
                self._owner_pid = os.getpid()
                self._sleeps_until = 0.0
                threading.Thread(target=self._watch, name="store-budget", daemon=True).start()
            self._armed.add(budget)
            # Woken only when it would otherwise sleep past this budget: most requests end
            # long before any budget does, and cost the thread nothing.
            if budget.next_check < self._sleeps_until:
                self._wake.notify()

    def disarm(self, budget: Budget) -> None:
        with self._wake:
            self._armed.discard(budget)

    def _watch(self) -> None:
        while True:
            with self._wake:
                now = time.monotonic()
                due = [budget for budget in self._armed if budget.next_check <= now]
                for budget in due:
                    budget.cut = True
                    budget.next_check = now + RECUT_SECONDS
                if not due:
                    self._sleeps_until = min((b.next_check for b in self._armed), default=now + 60)
                    self._wake.wait(max(0.0, self._sleeps_until - now))
                    continue
            for budget in due:
                _shut_down(budget.database)


_watchdog = _Watchdog()


def _shut_down(database: Any) -> None:
    """Shut down the socket of ``database``'s open connection, if it has one."""
    raw = getattr(database, "connection", None)
    if raw is None or raw.closed:
        return
    try:
        fd = raw.pgconn.socket
    except Exception:
        return
    # A duplicate of the descriptor: shutting it down ends the connection for both, and
    # closing the duplicate leaves the driver's own descriptor to the driver.
    with contextlib.suppress(OSError), socket.socket(fileno=os.dup(fd)) as sock:
        sock.shutdown(socket.SHUT_RDWR)


@contextlib.contextmanager
def bounded(seconds: float, *, database: Any = None) -> Iterator[Budget]:
    """Bound the database waits inside the block to ``seconds`` (and to any budget around it):
    past them, the connection of ``database`` (the default database's, of this thread) is cut."""
    outer = _current.get()
    deadline = time.monotonic() + seconds
    if outer is not None:
        deadline = min(deadline, outer.deadline)
    budget = Budget(deadline, database if database is not None else connections[DEFAULT_DB_ALIAS])
    _watchdog.arm(budget)
    token = _current.set(budget)
    try:
        yield budget
    finally:
        _current.reset(token)
        _watchdog.disarm(budget)


def spent() -> bool:
    """Whether the budget this code runs in ran out and its connection was cut."""
    budget = _current.get()
    return budget is not None and budget.cut


def each_bounded(chunks: Iterator[Any], seconds: float) -> Iterator[Any]:
    """``chunks``, each produced within its own budget of ``seconds``: a response streamed
    after its view (a CSV export reads a batch of rows for some of its chunks)."""
    while True:
        with bounded(seconds):
            try:
                chunk = next(chunks)
            except StopIteration:
                return
        yield chunk
