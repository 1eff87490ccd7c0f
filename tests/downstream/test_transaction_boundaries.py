"""The transaction that holds a key's lock is the only-once promise: a route cannot end it,
the lock is taken before the body arrives, and the look-up's re-load sees fresh commits."""

from __future__ import annotations

import asyncio
import socket
import time
import uuid
from collections.abc import Awaitable, Callable

import httpx
import pytest
from sqlalchemy import insert
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker, create_async_engine
from starlette.applications import Starlette

from agent_ledger_downstream import asgi
from agent_ledger_downstream.protocol import fingerprint
from sandbox.invoices import async_url
from tests.downstream.conftest import TOKEN, Service
from tests.downstream.test_services import _count, _invoice, _lookup, _post, _replayed

pytestmark = [pytest.mark.django_db, pytest.mark.slow]


def test_a_route_that_commits_its_own_transaction_gets_500_and_keeps_nothing(
    service: Service,
) -> None:
    key, customer = str(uuid.uuid4()), str(uuid.uuid4())
    early = _post(service, key, _invoice(customer), fault="commit-early")
    assert early.status_code == 500
    assert _count(service, customer) == 0
    assert _lookup(service, key).status_code == 404
    retried = _post(service, key, _invoice(customer))
    assert retried.status_code == 201 and not _replayed(retried)
    assert _count(service, customer) == 1


def _start_upload(service: Service, key: str, body: bytes) -> socket.socket:
    """A POST whose headers and first half of the body are sent; the rest is still to come."""
    host, port = service.url.removeprefix("http://").split(":")
    client = socket.create_connection((host, int(port)), timeout=15)
    head = (
        f"POST /invoices HTTP/1.1\r\nHost: {host}\r\nIdempotency-Key: {key}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
        "Connection: close\r\n\r\n"
    ).encode()
    client.sendall(head + body[: len(body) // 2])
    return client


def _finish_upload(client: socket.socket, body: bytes) -> bytes:
    client.sendall(body[len(body) // 2 :])
    answer = b""
    while chunk := client.recv(65536):
        answer += chunk
    client.close()
    return answer


def test_the_look_up_says_in_progress_while_the_body_is_still_arriving(
    service: Service,
) -> None:
    key, customer = str(uuid.uuid4()), str(uuid.uuid4())
    body = httpx.Request("POST", "/", json=_invoice(customer)).content
    client = _start_upload(service, key, body)
    deadline = time.monotonic() + 5
    statuses = []
    while time.monotonic() < deadline:
        statuses.append(_lookup(service, key).status_code)
        if statuses[-1] == 409:
            break
        time.sleep(0.05)
    answer = _finish_upload(client, body)
    assert statuses[-1] == 409, statuses
    assert 404 not in statuses, statuses
    assert answer.startswith(b"HTTP/1.1 201"), answer[:200]
    assert _count(service, customer) == 1


def _committing_between_loads(
    sessions: async_sessionmaker[AsyncSession], key: str
) -> Callable[..., Awaitable[object]]:
    """``asgi._load`` that, after the look-up's first load, commits a request under ``key``
    from another connection: the moment a real request commits between the two loads."""
    load = asgi._load
    calls = 0

    async def load_then_commit(session: AsyncSession, caller: str, looked_up: str) -> object:
        nonlocal calls
        calls += 1
        stored = await load(session, caller, looked_up)
        if calls == 1:
            async with sessions() as other, other.begin():
                await other.execute(
                    insert(asgi.idempotency_keys).values(
                        key=key,
                        fingerprint=fingerprint(method="POST", path="/x", body=b""),
                        method="POST",
                        path="/x",
                        status=201,
                        content_type="application/json",
                        body=b"{}",
                    )
                )
        return stored

    return load_then_commit


@pytest.mark.parametrize("isolation", ["REPEATABLE READ", "SERIALIZABLE"])
def test_the_look_up_finds_a_commit_between_its_loads_at_any_isolation(
    running_service: Service, monkeypatch: pytest.MonkeyPatch, isolation: str
) -> None:
    if running_service.kind != "fastapi":
        pytest.skip("drives the ASGI middleware in this process")
    key = str(uuid.uuid4())

    async def look_up() -> httpx.Response:
        engine = create_async_engine(
            async_url(running_service.database_url), isolation_level=isolation
        )
        sessions = async_sessionmaker(engine)
        monkeypatch.setattr(asgi, "_load", _committing_between_loads(sessions, key))
        app = asgi.IdempotencyMiddleware(
            Starlette(), sessionmaker=sessions, routes=[], check=asgi.token_check(TOKEN)
        )
        transport = httpx.ASGITransport(app=app)
        try:
            async with httpx.AsyncClient(transport=transport, base_url="http://s") as client:
                return await client.get(
                    f"/idempotency/{key}", headers={"Authorization": f"Bearer {TOKEN}"}
                )
        finally:
            await engine.dispose()

    response = asyncio.run(look_up())
    assert response.status_code == 200, response.text
    assert response.json()["idempotency_key"] == key
