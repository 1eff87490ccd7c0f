"""What a service keeps under a key: secret-named fields redacted and no query string, so the
table, the replay and the look-up never hold the secrets a response or a URL carried."""

from __future__ import annotations

import uuid

import httpx
import psycopg
import pytest

from tests.downstream.conftest import Service
from tests.downstream.test_services import _invoice, _lookup, _replayed

pytestmark = [pytest.mark.django_db, pytest.mark.slow]


def _stored_row(service: Service, key: str) -> tuple[str, bytes]:
    with psycopg.connect(service.database_url) as connection:
        row = connection.execute(
            "SELECT path, body FROM agent_ledger_idempotency_keys WHERE key = %s", [key]
        ).fetchone()
    assert row is not None
    return row[0], bytes(row[1])


def test_a_secret_in_the_response_is_redacted_in_storage_replay_and_look_up(
    service: Service,
) -> None:
    key = str(uuid.uuid4())
    first = httpx.post(
        f"{service.url}/invoices?signature=query-secret",
        json=_invoice(str(uuid.uuid4())),
        headers={"Idempotency-Key": key},
        timeout=15,
    )
    assert first.status_code == 201
    token = first.json()["portal_token"]
    assert token and token != "[redacted]"
    path, body = _stored_row(service, key)
    assert path == "/invoices"
    assert token.encode() not in body and b"query-secret" not in body
    again = httpx.post(
        f"{service.url}/invoices?signature=query-secret",
        json=_invoice(first.json()["customer"]),
        headers={"Idempotency-Key": key},
        timeout=15,
    )
    assert _replayed(again) and again.json()["portal_token"] == "[redacted]"
    found = _lookup(service, key).json()
    assert found["request"]["path"] == "/invoices"
    assert found["response"]["body"]["portal_token"] == "[redacted]"
    assert found["response"]["body"]["id"] == first.json()["id"]
