"""A key belongs to the caller that sent it: another caller's request with the same key runs on
its own and never gets the first caller's stored response; the look-up names the scope."""

from __future__ import annotations

import uuid

import httpx
import pytest

from tests.downstream.conftest import TOKEN, Service
from tests.downstream.test_services import _count, _invoice, _replayed

pytestmark = [pytest.mark.django_db, pytest.mark.slow]


def _post_as(service: Service, caller: str, key: str, body: dict) -> httpx.Response:
    headers = {"Idempotency-Key": key, "X-Caller": caller}
    return httpx.post(f"{service.url}/invoices", json=body, headers=headers, timeout=15)


def _lookup_in(service: Service, key: str, scope: str | None) -> httpx.Response:
    params = {"access_token": TOKEN, **({"scope": scope} if scope is not None else {})}
    return httpx.get(f"{service.url}/idempotency/{key}", params=params, timeout=5)


def test_another_callers_key_runs_apart_and_never_gets_the_first_response(
    service: Service,
) -> None:
    key, customer = str(uuid.uuid4()), str(uuid.uuid4())
    alice = _post_as(service, "alice", key, _invoice(customer))
    bob = _post_as(service, "bob", key, _invoice(customer))
    assert alice.status_code == bob.status_code == 201
    assert not _replayed(bob) and bob.json()["id"] != alice.json()["id"]
    again = _post_as(service, "alice", key, _invoice(customer))
    assert _replayed(again) and again.json()["id"] == alice.json()["id"]
    assert _count(service, customer) == 2


def test_the_look_up_answers_from_the_scope_it_names(service: Service) -> None:
    key = str(uuid.uuid4())
    created = _post_as(service, "alice", key, _invoice(str(uuid.uuid4())))
    found = _lookup_in(service, key, "alice")
    assert found.status_code == 200
    assert found.json()["response"]["body"]["id"] == created.json()["id"]
    assert _lookup_in(service, key, "bob").status_code == 404
    assert _lookup_in(service, key, None).status_code == 404
