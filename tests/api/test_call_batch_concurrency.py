"""Batches that share keys, sent at once from two runtimes through the live server: the
reservations wait on each other in one order, so none is refused for a deadlock, and each
action executes once."""

from __future__ import annotations

import threading
from typing import Any

import httpx
import pytest

from ledger.models import IdempotencyRecord, Run
from ledger.services.registry import ensure_catalogue_tool
from tests.api.conftest import ApiClient

pytestmark = pytest.mark.django_db(transaction=True)

ROUNDS = 30
KEYS = 8


def _batch(round_: int, order: list[int], runtime: str) -> dict[str, Any]:
    return {
        "calls": [
            {
                "run_id": "run-1",
                "step_id": f"{runtime}-{round_}-{n}",
                "tool": "create_order",
                "input": {"cart": n},
                "business_object_id": f"cart-{round_}-{n}",
            }
            for n in order
        ]
    }


def test_batches_sharing_keys_in_opposite_orders_never_deadlock(
    api: ApiClient, live_server: Any
) -> None:
    api.start_run()
    ensure_catalogue_tool(tenant=api.tenant, name="create_order", actor="test", source="api")
    assert Run.objects.filter(tenant=api.tenant, run_id="run-1").exists()
    headers = {"Authorization": f"Bearer {api.token}"}
    statuses: list[int] = []
    lock = threading.Lock()

    def runtime(name: str, order: list[int], start: threading.Barrier) -> None:
        with httpx.Client(base_url=f"{live_server.url}/api/v1", headers=headers) as http:
            for round_ in range(ROUNDS):
                start.wait()
                response = http.post("/calls/batch", json=_batch(round_, order, name), timeout=30)
                with lock:
                    if response.status_code != 200:
                        statuses.append(response.status_code)
                        continue
                    statuses.extend(item["status"] for item in response.json()["results"])

    start = threading.Barrier(2)
    forward, backward = list(range(KEYS)), list(reversed(range(KEYS)))
    threads = [
        threading.Thread(target=runtime, args=("a", forward, start)),
        threading.Thread(target=runtime, args=("b", backward, start)),
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    # Each key executed by one runtime, the other told to wait: no 503 for a deadlock.
    assert sorted(set(statuses)) == [200, 409], statuses
    assert statuses.count(200) == statuses.count(409) == ROUNDS * KEYS
    records = IdempotencyRecord.objects.filter(tenant=api.tenant, state="executing")
    assert records.count() == ROUNDS * KEYS and all(r.executions == 1 for r in records)
