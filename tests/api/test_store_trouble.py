"""Trouble with the database is a 503 with Retry-After that changed nothing, never a 500;
a connection that saw a read-only error is dropped at once, so the next request works."""

from __future__ import annotations

import time

import pytest
from django.conf import settings
from django.db import connection

from ledger.models import IdempotencyRecord
from tests.api.conftest import ApiClient, locked_elsewhere

pytestmark = pytest.mark.django_db(transaction=True)


def _read_only_session() -> None:
    with connection.cursor() as cursor:
        cursor.execute("SET SESSION CHARACTERISTICS AS TRANSACTION READ ONLY")


def test_a_read_only_database_is_503_and_the_connection_is_dropped(api: ApiClient) -> None:
    _read_only_session()
    refused = api.post("/runs", {"run_id": "r-ro", "user_id": "u"})
    assert refused.status_code == 503
    assert refused["Retry-After"]
    body = refused.json()
    assert body["code"] == "LEDGER_STORE_UNAVAILABLE" and body["reason"] == "read_only"
    assert connection.connection is None  # dropped, not kept for its max age
    again = api.post("/runs", {"run_id": "r-ro", "user_id": "u"})
    assert again.status_code in (200, 201), again.content


def test_readyz_reports_a_read_only_database(client) -> None:
    assert client.get("/readyz").status_code == 200
    _read_only_session()
    answer = client.get("/readyz")
    assert answer.status_code == 503 and answer.json()["checks"]["database"] == "read_only"
    assert client.get("/healthz").status_code == 200  # liveness stays up


def test_a_locked_record_is_answered_within_the_lock_timeout(api: ApiClient) -> None:
    api.start_run()
    first = api.call("create_order", {"cart": "c-1"}, business_object_id="cart-1")
    assert first.json()["decision"] == "execute"
    record = IdempotencyRecord.objects.get()
    with locked_elsewhere(record):
        began = time.monotonic()
        duplicate = api.call("create_order", {"cart": "c-1"}, business_object_id="cart-1")
        took = time.monotonic() - began
        other_key = api.call("create_order", {"cart": "c-2"}, business_object_id="cart-2")
    assert duplicate.status_code == 503 and duplicate.json()["reason"] == "lock_timeout"
    assert took < settings.DATABASE_TIMEOUTS_MS["lock_timeout"] / 1000 + 3
    assert other_key.status_code == 200 and other_key.json()["decision"] == "execute"
    assert IdempotencyRecord.objects.get(pk=record.pk).duplicate_hits == 0  # nothing changed
