"""What the ledger requires of PostgreSQL's replication, and the check that it gets it.

A decision the ledger answered (``execute``, a recorded result, a completion) must survive a
failover: otherwise a promoted standby has no record of a reservation whose caller already ran
the tool, and the same key is answered ``execute`` again (docs/runbook.md, "Failover"). That
holds only when every commit waits for a standby: ``synchronous_standby_names`` names one and
``synchronous_commit`` is ``on``, ``remote_write`` or ``remote_apply`` in the ledger's
sessions. With ``DATABASE_REQUIRE_SYNCHRONOUS_COMMIT`` on, each new connection is checked
before it serves (so a process checks at its start, and again whenever it connects afresh),
and ``/readyz`` checks on every probe; a database that does not meet it is store trouble,
503 ``replication_not_synchronous``, rather than answers a failover could take back.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.db.backends.signals import connection_created

from ledger.store import NotSynchronous

#: The values of ``synchronous_commit`` under which a commit waits for the standby.
SYNCHRONOUS_COMMITS = frozenset({"on", "remote_write", "remote_apply"})
#: One round trip reads both settings as this session sees them.
SETTINGS_SQL = (
    "SELECT current_setting('synchronous_standby_names'), current_setting('synchronous_commit')"
)


def lacking(standby_names: str, synchronous_commit: str) -> str | None:
    """What keeps commits from waiting for a standby under these two settings, or None."""
    if not standby_names.strip():
        return "synchronous_standby_names is empty"
    if synchronous_commit not in SYNCHRONOUS_COMMITS:
        return f"synchronous_commit is {synchronous_commit}"
    return None


def check_connection(sender: Any, connection: Any, **kwargs: Any) -> None:
    """``connection_created``: refuse a new connection whose commits would not wait for a
    standby. It is closed first, so the next request connects (and checks) afresh."""
    if not settings.DATABASE_REQUIRE_SYNCHRONOUS_COMMIT or connection.vendor != "postgresql":
        return
    with connection.cursor() as cursor:
        cursor.execute(SETTINGS_SQL)
        names, commit = cursor.fetchone()
    why = lacking(names, commit)
    if why is not None:
        connection.close()
        raise NotSynchronous(why)


def watch_connections() -> None:
    """Check every new connection of this process (``LedgerConfig.ready``)."""
    connection_created.connect(check_connection, dispatch_uid="ledger.replication")
