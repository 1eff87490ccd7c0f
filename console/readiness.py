"""Readiness: whether this process can serve calls now, for a load balancer to route by.

``/healthz`` is liveness (the process answers). ``/readyz`` is 200 only when PostgreSQL takes
writes from this process (reachable, not starting, not read-only, a connection slot free);
otherwise 503 with what is wrong, so traffic goes elsewhere meanwhile. The broker is checked
and reported too, but does not make the process unready: without Redis the API still reserves
and records (DESIGN section 7), and the periodic sweep enqueues what was missed.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.db import DatabaseError, connection
from django.http import HttpRequest, JsonResponse

from ledger.store import forget_connection, store_trouble

BROKER_TIMEOUT_SECONDS = 1


def _database() -> str | None:
    """None when the database takes writes from this process, else what is wrong."""
    try:
        with connection.cursor() as cursor:
            # A new transaction is read-only on a standby or under default_transaction_read_only.
            cursor.execute(
                "SELECT pg_is_in_recovery() OR current_setting('transaction_read_only') = 'on'"
            )
            row = cursor.fetchone()
    except DatabaseError as exc:
        trouble = store_trouble(exc)
        if trouble is None:
            return f"error: {type(exc).__name__}"
        forget_connection(trouble)
        return trouble.reason
    if row is None or row[0]:
        connection.close()  # a read-only session is not worth keeping
        return "read_only"
    return None


def _broker() -> str | None:
    from kombu import Connection

    try:
        with Connection(settings.CELERY_BROKER_URL, connect_timeout=BROKER_TIMEOUT_SECONDS) as c:
            c.ensure_connection(max_retries=1, timeout=BROKER_TIMEOUT_SECONDS)
    except Exception as exc:
        return f"unreachable: {type(exc).__name__}"
    return None


def readyz(request: HttpRequest) -> JsonResponse:
    checks: dict[str, Any] = {"database": _database(), "broker": _broker()}
    ready = checks["database"] is None
    status = "unavailable" if not ready else "degraded" if checks["broker"] else "ready"
    body = {"status": status, "checks": {name: why or "ok" for name, why in checks.items()}}
    response = JsonResponse(body, status=200 if ready else 503)
    if not ready:
        response["Retry-After"] = "2"
    return response
