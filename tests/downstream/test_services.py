"""A Django and a FastAPI service on agent_ledger_downstream, each a real process: the
Idempotency-Key semantics, and the ledger settling unknown calls through the look-up while the
service is killed at the worst moments."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta

import httpx
import psycopg
import pytest
from sqlalchemy.ext.asyncio import async_sessionmaker, create_async_engine

from agent_ledger_downstream.asgi import delete_expired
from agent_ledger_downstream.protocol import lock_id
from ledger.domain import RecordState
from ledger.models import IdempotencyRecord
from ledger.records import Outcome, complete_execution
from reconcile.models import DownstreamAdapter, ReconcileAttempt
from reconcile.services import reconcile_record
from sandbox.invoices import async_url
from tests.downstream.conftest import TOKEN, Service
from tests.factories import refresh, reserve

pytestmark = [
    pytest.mark.django_db,
    pytest.mark.slow,
    pytest.mark.usefixtures("private_downstreams"),
]


def _post(
    service: Service,
    key: str | None,
    body: dict,
    *,
    fault: str = "",
    seconds: float = 0.5,
    timeout: float = 15,
) -> httpx.Response:
    headers = {"X-Fault": fault, "X-Fault-Seconds": str(seconds)} if fault else {}
    if key is not None:
        headers["Idempotency-Key"] = key
    return httpx.post(f"{service.url}/invoices", json=body, headers=headers, timeout=timeout)


def _invoice(customer: str) -> dict:
    return {"customer": customer, "amount_cents": 1250}


def _count(service: Service, customer: str) -> int:
    response = httpx.get(f"{service.url}/invoices/stats", params={"customer": customer}, timeout=5)
    return int(response.json()["invoices"])


def _lookup(service: Service, key: str, token: str = TOKEN) -> httpx.Response:
    return httpx.get(f"{service.url}/idempotency/{key}", params={"access_token": token}, timeout=5)


def _unknown(tenant, tool, key: str = "") -> IdempotencyRecord:
    key = key or f"agent:acme:u1:run-1:create_invoice:{uuid.uuid4()}"
    record = reserve(tenant, tool, key=key).record
    return complete_execution(record=record, fencing_token=1, outcome=Outcome.UNCERTAIN, actor="w")


def _register(tenant, tool, service: Service) -> DownstreamAdapter:
    """The one thing a service needs in the ledger: an HTTP adapter with the look-up URL."""
    return DownstreamAdapter.objects.create(
        tenant=tenant,
        tool=tool,
        url_template=f"{service.url}/idempotency/{{key}}?access_token={TOKEN}",
        found_statuses=[200],
        not_found_statuses=[404],
        grace_seconds=0,
    )


def _replayed(response: httpx.Response) -> bool:
    return response.headers.get("Idempotent-Replayed") == "true"


def test_a_marked_route_without_a_key_is_refused_with_a_problem(service: Service) -> None:
    customer = str(uuid.uuid4())
    response = _post(service, None, _invoice(customer))
    assert response.status_code == 400
    assert response.headers["Content-Type"].startswith("application/problem+json")
    assert response.json()["title"] == "Idempotency-Key is missing"
    assert _count(service, customer) == 0


def test_a_duplicate_gets_the_stored_response_and_the_replayed_header(service: Service) -> None:
    key, customer = str(uuid.uuid4()), str(uuid.uuid4())
    first = _post(service, key, _invoice(customer))
    again = _post(service, key, {"amount_cents": 1250, "customer": customer})  # same content
    assert first.status_code == again.status_code == 201
    assert again.json() == {**first.json(), "portal_token": "[redacted]"}
    assert not _replayed(first) and _replayed(again)
    assert _count(service, customer) == 1


def test_another_payload_under_a_key_is_422_and_changes_nothing(service: Service) -> None:
    key, customer = str(uuid.uuid4()), str(uuid.uuid4())
    assert _post(service, key, _invoice(customer)).status_code == 201
    other = _post(service, key, _invoice(customer + "-other"))
    assert other.status_code == 422
    assert other.headers["Content-Type"].startswith("application/problem+json")
    assert "another payload" in other.json()["title"]
    assert _count(service, customer + "-other") == 0


def test_a_response_outside_2xx_rolls_back_and_leaves_the_key_free(service: Service) -> None:
    key, customer = str(uuid.uuid4()), str(uuid.uuid4())
    refused = _post(service, key, {"customer": customer, "amount_cents": 0})
    assert refused.status_code == 422 and not _replayed(refused)
    assert _lookup(service, key).status_code == 404
    created = _post(service, key, _invoice(customer))
    assert created.status_code == 201 and not _replayed(created)
    assert _count(service, customer) == 1


def test_fifty_concurrent_requests_with_one_key_run_once(service: Service) -> None:
    key, customer = str(uuid.uuid4()), str(uuid.uuid4())
    start = threading.Barrier(50)

    def send(_: int) -> httpx.Response:
        start.wait()
        # The first holds its key for 3 s: long enough for the others to arrive while it runs
        # on a loaded machine, so some of them find the key busy.
        return _post(service, key, _invoice(customer), fault="hold", seconds=3.0)

    with ThreadPoolExecutor(50) as pool:
        responses = list(pool.map(send, range(50)))
    kinds = Counter(
        "ran"
        if r.status_code == 201 and not _replayed(r)
        else "replayed"
        if r.status_code == 201
        else "busy"
        if r.status_code == 409 and r.headers.get("Retry-After")
        else f"other {r.status_code}"
        for r in responses
    )
    assert kinds["ran"] == 1, kinds
    assert kinds["ran"] + kinds["replayed"] + kinds["busy"] == 50, kinds
    assert kinds["busy"] >= 1, kinds
    assert _count(service, customer) == 1
    assert _post(service, key, _invoice(customer + "-other")).status_code == 422


def test_killed_after_the_commit_is_found_and_settles_succeeded(
    service: Service, tenant, create_order
) -> None:
    record = _unknown(tenant, create_order)
    customer = str(uuid.uuid4())
    with pytest.raises(httpx.TransportError):
        _post(service, record.key, _invoice(customer), fault="exit-after-commit")
    service.process.ensure_running()
    _register(tenant, create_order, service)
    assert reconcile_record(record.pk, worker="w1") == "succeeded"
    settled = refresh(record)
    assert settled.state == RecordState.SUCCEEDED
    evidence = settled.result["evidence"]
    assert evidence["status"] == "found" and evidence["response"]["status"] == 201
    retries = [_post(service, record.key, _invoice(customer)) for _ in range(10)]
    assert all(r.status_code == 201 and _replayed(r) for r in retries)
    assert _count(service, customer) == 1


def test_killed_before_the_commit_is_not_found_and_settles_failed_final(
    service: Service, tenant, create_order
) -> None:
    record = _unknown(tenant, create_order)
    customer = str(uuid.uuid4())
    with pytest.raises(httpx.TransportError):
        _post(service, record.key, _invoice(customer), fault="exit-before-commit")
    service.process.ensure_running()
    _register(tenant, create_order, service)
    assert reconcile_record(record.pk, worker="w1") == "failed_final"
    settled = refresh(record)
    assert settled.state == RecordState.FAILED_FINAL
    assert settled.error["code"] == "NOT_EXECUTED"
    assert _count(service, customer) == 0
    retries = [_post(service, record.key, _invoice(customer)) for _ in range(10)]
    assert [_replayed(r) for r in retries] == [False] + [True] * 9
    assert all(r.status_code == 201 for r in retries)
    assert _count(service, customer) == 1


# The table each service writes its invoices to: a test that holds it locked keeps a request
# inside its transaction, with its key taken, for as long as the test needs.
INVOICE_TABLES = {"fastapi": "sandbox_invoices", "django": "django_service_invoice"}


def test_a_request_in_progress_is_looked_up_again_later(
    service: Service, tenant, create_order
) -> None:
    record = _unknown(tenant, create_order)
    customer = str(uuid.uuid4())
    _register(tenant, create_order, service)
    with psycopg.connect(service.database_url) as gate:
        # SHARE mode lets look-ups read and stops the invoice's INSERT until the gate commits.
        gate.execute(f"LOCK TABLE {INVOICE_TABLES[service.kind]} IN SHARE MODE")
        slow = ThreadPoolExecutor(1).submit(
            _post, service, record.key, _invoice(customer), timeout=120
        )
        deadline = time.monotonic() + 30
        while _lookup(service, record.key).status_code != 409:
            assert not slow.done(), slow.result()
            assert time.monotonic() < deadline, "the request never showed as in progress"
            time.sleep(0.05)
        assert reconcile_record(record.pk, worker="w1") == "retry-later"
        assert refresh(record).state == RecordState.UNKNOWN
    assert slow.result(timeout=30).status_code == 201
    assert reconcile_record(record.pk, worker="w1") == "succeeded"
    outcomes = ReconcileAttempt.objects.filter(record=record).order_by("attempt")
    assert list(outcomes.values_list("outcome", flat=True)) == ["unreachable", "found"]


def test_a_look_up_in_flight_never_turns_the_request_away(service: Service) -> None:
    """A look-up holds the key's lock (shared) for one read: a request arriving then waits it
    out and runs, instead of being told its own key is in progress."""
    key, customer = str(uuid.uuid4()), str(uuid.uuid4())
    with psycopg.connect(service.database_url) as lookup:
        lookup.execute("SELECT pg_advisory_xact_lock_shared(%s)", [lock_id(key)])
        posted = ThreadPoolExecutor(1).submit(_post, service, key, _invoice(customer))
        time.sleep(0.2)
        assert not posted.done(), posted.result()  # waiting behind the look-up's read
        lookup.rollback()
    assert posted.result(timeout=15).status_code == 201
    assert _count(service, customer) == 1


def test_a_second_request_while_the_first_runs_is_answered_409_after_a_bounded_wait(
    service: Service,
) -> None:
    key, customer = str(uuid.uuid4()), str(uuid.uuid4())
    with psycopg.connect(service.database_url) as running:
        running.execute("SELECT pg_advisory_xact_lock(%s)", [lock_id(key)])  # the first request
        started = time.monotonic()
        second = _post(service, key, _invoice(customer))
        waited = time.monotonic() - started
        running.rollback()
    assert second.status_code == 409, second.text
    assert waited >= 0.45  # it waited for the lock (500 ms) before answering
    assert _count(service, customer) == 0
    # The look-up says the same while a request runs, without waiting.
    with psycopg.connect(service.database_url) as running:
        running.execute("SELECT pg_advisory_xact_lock(%s)", [lock_id(key)])
        assert _lookup(service, key).status_code == 409
        running.rollback()


def test_a_key_with_slashes_and_percent_signs_is_found_by_the_ledger(
    service: Service, tenant, create_order
) -> None:
    record = _unknown(tenant, create_order, key=f"orders/{uuid.uuid4()}/50%25 off:%2F")
    assert _post(service, record.key, _invoice(str(uuid.uuid4()))).status_code == 201
    _register(tenant, create_order, service)
    assert reconcile_record(record.pk, worker="w1") == "succeeded"
    assert refresh(record).result["evidence"]["idempotency_key"] == record.key


def test_the_look_up_answers_only_to_the_configured_token(service: Service) -> None:
    key = str(uuid.uuid4())
    assert _post(service, key, _invoice(str(uuid.uuid4()))).status_code == 201
    refused = _lookup(service, key, token="wrong")
    assert refused.status_code == 401 and "Bearer" in refused.headers["WWW-Authenticate"]
    bearer = httpx.get(
        f"{service.url}/idempotency/{key}", headers={"Authorization": f"Bearer {TOKEN}"}
    )
    assert bearer.status_code == 200 and bearer.json()["idempotency_key"] == key


def _clean(service: Service, *, hours: float, batch_size: int) -> int:
    if service.kind == "django":
        output = subprocess.run(
            [
                *(sys.executable, "-m", "django", "clean_idempotency_keys"),
                *("--retention-hours", str(hours), "--batch-size", str(batch_size)),
            ],
            env={**os.environ, **service.process.env},
            capture_output=True,
            text=True,
            check=True,
            timeout=60,
        ).stdout
        return int(output.split()[1])

    async def clean() -> int:
        engine = create_async_engine(async_url(service.database_url))
        try:
            return await delete_expired(
                async_sessionmaker(engine), retention=timedelta(hours=hours), batch_size=batch_size
            )
        finally:
            await engine.dispose()

    return asyncio.run(clean())


def _age(service: Service, key: str, age: str) -> None:
    """Backdate a stored response by PostgreSQL's clock, the one the clean-up reads."""
    with psycopg.connect(service.database_url) as connection:
        connection.execute(
            "UPDATE agent_ledger_idempotency_keys SET created_at = now() - %s::interval"
            " WHERE key = %s",
            [age, key],
        )


def test_cleanup_keeps_records_within_the_retention(service: Service) -> None:
    key = str(uuid.uuid4())
    assert _post(service, key, _invoice(str(uuid.uuid4()))).status_code == 201
    _age(service, key, "23 hours")
    _clean(service, hours=24, batch_size=2)
    assert _lookup(service, key).status_code == 200


def test_cleanup_deletes_expired_records_in_batches(service: Service) -> None:
    keys = [str(uuid.uuid4()) for _ in range(3)]
    for key in keys:
        assert _post(service, key, _invoice(str(uuid.uuid4()))).status_code == 201
        _age(service, key, "25 hours")
    assert _clean(service, hours=24, batch_size=2) >= 3
    assert [_lookup(service, key).status_code for key in keys] == [404] * 3


@pytest.mark.parametrize(("hours", "batch_size"), [(24, 0), (0, 1000), (23.9, 1000)])
def test_cleanup_refuses_limits_that_are_not_positive_or_a_retention_under_a_day(
    service: Service, hours: float, batch_size: int
) -> None:
    key = str(uuid.uuid4())
    assert _post(service, key, _invoice(str(uuid.uuid4()))).status_code == 201
    _age(service, key, "30 days")
    with pytest.raises((ValueError, subprocess.CalledProcessError)):
        _clean(service, hours=hours, batch_size=batch_size)
    assert _lookup(service, key).status_code == 200
