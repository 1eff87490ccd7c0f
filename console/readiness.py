"""Readiness: whether this process can serve calls now, for a load balancer to route by.

``/healthz`` is liveness (the process answers). ``/readyz`` is 200 only when PostgreSQL takes
writes from this process (reachable within ``DATABASE_CHECK_SECONDS``, not starting, not
read-only, a connection slot free, and with ``DATABASE_REQUIRE_SYNCHRONOUS_COMMIT`` its commits
waiting for a synchronous standby); otherwise 503 with what is wrong, so traffic goes elsewhere
meanwhile. The broker is checked
and reported too, but does not make the process unready: without Redis the API still reserves
and records (DESIGN section 7), and the periodic sweep enqueues what was missed.

Both are answered before the host is validated and before the redirect to HTTPS
(``ProbeMiddleware``): an orchestrator probes a process by its own address over plain HTTP (a
kubelet sends the pod's address as the host, a compose healthcheck 127.0.0.1), which
``ALLOWED_HOSTS`` would refuse and ``SECURE_SSL_REDIRECT`` would send elsewhere. A probe's
answer builds no URL from the host and carries nothing that needs TLS.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.db import DatabaseError, connection
from django.http import HttpRequest, HttpResponse, JsonResponse

from ledger import replication, store_budget
from ledger.store import NotSynchronous, forget_connection, store_trouble

BROKER_TIMEOUT_SECONDS = 1
#: A probe's own database time: a load balancer's check waits a few seconds, not a request's.
DATABASE_CHECK_SECONDS = 2


def _database() -> str | None:
    """None when the database takes writes from this process, else what is wrong."""
    with store_budget.bounded(DATABASE_CHECK_SECONDS):
        try:
            with connection.cursor() as cursor:
                # A new transaction is read-only on a standby or under
                # default_transaction_read_only.
                cursor.execute(
                    "SELECT pg_is_in_recovery() OR current_setting('transaction_read_only') = 'on',"
                    + replication.SETTINGS_SQL.removeprefix("SELECT")
                )
                read_only, standby_names, synchronous_commit = cursor.fetchone()
            lacking = replication.lacking(standby_names, synchronous_commit)
            if settings.DATABASE_REQUIRE_SYNCHRONOUS_COMMIT and lacking:
                raise NotSynchronous(lacking)
        except DatabaseError as exc:
            trouble = store_trouble(exc)
            if trouble is None:
                return f"error: {type(exc).__name__}"
            forget_connection(trouble)
            return f"{trouble.reason}: {exc}" if isinstance(exc, NotSynchronous) else trouble.reason
    if read_only:
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


def healthz(request: HttpRequest) -> JsonResponse:
    """Liveness probe: the process answers; touches nothing (``/readyz`` checks what it needs)."""
    return JsonResponse({"status": "ok"})


PROBES: dict[str, Callable[[HttpRequest], JsonResponse]] = {"/healthz": healthz, "/readyz": readyz}


class ProbeMiddleware:
    """Answers ``GET /healthz`` and ``GET /readyz`` ahead of the host check and the HTTPS
    redirect (the module's docstring says why); every other request goes on as usual."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        probe = PROBES.get(request.path_info)
        if probe is not None and request.method in ("GET", "HEAD"):
            return probe(request)
        return self.get_response(request)
