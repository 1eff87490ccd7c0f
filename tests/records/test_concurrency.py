"""Reservation under real concurrency on PostgreSQL: threads with their own connections, and
separate OS processes. Exactly one caller executes; every other caller gets an explainable answer.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from django.db import connection, connections

from ledger.domain import Decision, ObservationCode
from ledger.keys import fingerprint
from ledger.models import AuditEvent, IdempotencyRecord
from ledger.records import Reservation
from tests.factories import make_tenant, make_tool, reserve
from tests.processes import server_url

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[2]


def _race(callers: int, params_for: callable) -> list[Reservation]:  # type: ignore[valid-type]
    tenant = make_tenant("race")
    tool = make_tool(tenant, "create_order")
    barrier = threading.Barrier(callers)

    def call(index: int) -> Reservation:
        try:
            barrier.wait(timeout=30)
            return reserve(
                tenant,
                tool,
                key="agent:race:u:run:create_order:cart-1",
                params=params_for(index),
                owner=f"thread-{index}",
            )
        finally:
            connections.close_all()

    with ThreadPoolExecutor(max_workers=callers) as pool:
        return list(pool.map(call, range(callers)))


@pytest.mark.parametrize("callers", [10, 50])
def test_concurrent_threads_one_key_exactly_one_executes(callers: int) -> None:
    results = _race(callers, lambda _i: {"cart": "cart-1"})
    decisions = Counter(r.decision for r in results)
    assert decisions[Decision.EXECUTE] == 1
    assert decisions[Decision.WAIT] == callers - 1
    assert all(
        r.code is ObservationCode.IN_PROGRESS for r in results if r.decision is Decision.WAIT
    )
    record = IdempotencyRecord.objects.get()
    assert (record.executions, record.duplicate_hits) == (1, callers - 1)


def test_concurrent_fingerprint_conflict_executes_nothing_twice() -> None:
    results = _race(20, lambda i: {"cart": "cart-1", "amount": i % 2})
    decisions = Counter(r.decision for r in results)
    assert decisions[Decision.EXECUTE] == 1
    assert decisions[Decision.CONFLICT] == 10  # every caller with the other fingerprint
    assert decisions[Decision.WAIT] == 9
    assert IdempotencyRecord.objects.get().executions == 1
    assert AuditEvent.objects.filter(action="record.key_conflict").count() == 10


def test_concurrent_processes_one_key_exactly_one_executes() -> None:
    tenant = make_tenant("procs")
    tool = make_tool(tenant, "charge_customer")
    settings_dict = connection.settings_dict
    env = {
        **os.environ,
        "DATABASE_URL": f"{server_url(settings_dict)}/{settings_dict['NAME']}",
        "PYTHONPATH": str(ROOT),
    }
    start_at = str(time.time() + 4)  # time for every interpreter to start and set up Django
    args = [
        str(tenant.pk),
        str(tool.pk),
        "agent:procs:u:charge_customer:inv-1",
        fingerprint({"invoice": "inv-1"}),
        start_at,
    ]
    processes = [
        subprocess.Popen(
            [sys.executable, "-m", "tests.records.reserve_worker", *args],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(10)
    ]
    outputs = []
    for process in processes:
        stdout, stderr = process.communicate(timeout=60)
        assert process.returncode == 0, stderr
        outputs.append(json.loads(stdout.strip().splitlines()[-1]))
    decisions = Counter(o["decision"] for o in outputs)
    assert decisions == {"execute": 1, "wait": 9}
    assert sum(o["created"] for o in outputs) == 1
    assert IdempotencyRecord.objects.get(tenant=tenant).executions == 1
