"""A request's time on the database is bounded by the service itself (``ledger.store_budget``):
with the network to PostgreSQL stalled, a request is answered 503 ``database_timeout`` with
Retry-After once its budget runs out, ``/readyz`` within its own short budget, and requests
succeed again as soon as the network does. The drill ``database_slow_then_stalled`` does the
same through gunicorn at +500 ms per round trip and a 60 s stall."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from django.db import connection

from console.readiness import DATABASE_CHECK_SECONDS
from drill.tcpproxy import TcpProxy
from tests.api.conftest import ApiClient

pytestmark = pytest.mark.django_db(transaction=True)

BUDGET_MS = 1500


@pytest.fixture
def proxied(settings) -> Iterator[TcpProxy]:
    """The test's own database connection goes through a proxy the test can stall."""
    db = connection.settings_dict
    if str(db["HOST"]).startswith("/"):
        pytest.skip("the database is reached through a Unix socket (embedded PostgreSQL)")
    proxy = TcpProxy(int(db["PORT"] or 5432), db["HOST"] or "127.0.0.1")
    proxy.start()
    host, port = db["HOST"], db["PORT"]
    connection.close()
    db["HOST"], db["PORT"] = "127.0.0.1", str(proxy.port)
    settings.DATABASE_REQUEST_BUDGET_MS = BUDGET_MS
    try:
        yield proxy
    finally:
        proxy.resume()
        connection.close()
        db["HOST"], db["PORT"] = host, port
        proxy.stop()


def test_a_stalled_database_is_a_503_within_the_budget(api: ApiClient, proxied) -> None:
    assert api.post("/runs", {"run_id": "r-before", "user_id": "u"}).status_code in (200, 201)
    proxied.stall()
    began = time.monotonic()
    stalled = api.post("/runs", {"run_id": "r-stalled", "user_id": "u"})
    took = time.monotonic() - began
    assert stalled.status_code == 503, stalled.content
    assert stalled.json()["reason"] == "database_timeout"
    assert stalled["Retry-After"]
    assert BUDGET_MS / 1000 - 0.1 < took < BUDGET_MS / 1000 + 1.5
    proxied.resume()
    again = api.post("/runs", {"run_id": "r-after", "user_id": "u"})
    assert again.status_code in (200, 201), again.content


def test_readyz_answers_within_its_own_budget_when_the_database_stalls(
    client, proxied, settings
) -> None:
    settings.DATABASE_REQUEST_BUDGET_MS = 30_000  # the probe's own budget is the shorter
    assert client.get("/readyz").status_code == 200
    proxied.stall()
    began = time.monotonic()
    answer = client.get("/readyz")
    took = time.monotonic() - began
    assert answer.status_code == 503
    assert answer.json()["checks"]["database"] == "database_timeout"
    assert took < DATABASE_CHECK_SECONDS + 1.5
    assert client.get("/healthz").status_code == 200


def test_a_slow_database_within_the_budget_is_served(api: ApiClient, proxied) -> None:
    proxied.delay = 0.05  # 50 ms a round trip: slow, and well within the budget
    began = time.monotonic()
    answer = api.post("/runs", {"run_id": "r-slow", "user_id": "u"})
    assert answer.status_code in (200, 201), answer.content
    assert time.monotonic() - began > 0.1  # it did go through the slow proxy
