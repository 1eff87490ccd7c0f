"""Unknown records resolved per minute per worker, against the sandbox at 50 ms latency."""

from __future__ import annotations

import os
import time
from datetime import UTC, datetime
from typing import Any

import httpx
from django.db import connection
from django.db.models import Max, Min

from bench import cpu
from bench.processes import Service
from ledger.domain import RecordState
from ledger.models import IdempotencyRecord, Tenant, Tool
from ledger.services.registry import ensure_catalogue_tool
from reconcile.models import DownstreamAdapter

TOOL = "charge_customer"


def arm_latency(sandbox_url: str, latency_ms: int) -> None:
    response = httpx.post(
        f"{sandbox_url}/_faults",
        json={
            "mode": "latency",
            "service": "*",
            "operation": "lookup",
            "latency_ms": latency_ms,
            "count": 10**9,
        },
        timeout=5,
    )
    response.raise_for_status()


def setup(tenant: Tenant, sandbox_url: str) -> Tool:
    tool = ensure_catalogue_tool(tenant=tenant, name=TOOL, actor="bench", source="api")
    DownstreamAdapter.objects.create(
        tenant=tenant,
        tool=tool,
        url_template=f"{sandbox_url}/payments/objects/by-key/{{key}}",
        found_statuses=[200],
        not_found_statuses=[404],
        grace_seconds=0,
        timeout_seconds=5,
    )
    return tool


def cpu_groups(workers: list[Service], redis: Service, sandbox: Service) -> dict[str, cpu.Pids]:
    """The processes a look-up costs CPU in. The sandbox stands in for a downstream that in
    production runs elsewhere; the bench process only polls the records (four times a second)."""
    return {
        "workers": lambda: [pid for worker in workers for pid in cpu.tree(worker.pid)],
        "postgres": cpu.postgres_pids,
        "redis": lambda: cpu.tree(redis.pid),
        "sandbox": lambda: cpu.tree(sandbox.pid),
        "bench": lambda: [os.getpid()],
    }


def make_unknown(tenant: Tenant, tool: Tool, count: int, tag: str) -> list[int]:
    now = datetime.now(UTC)
    records = [
        IdempotencyRecord(
            tenant=tenant,
            key=f"agent:bench:u:reconcile:{TOOL}:{tag}-{i}",
            tool=tool,
            fingerprint="0" * 64,
            state=RecordState.UNKNOWN,
            ttl_seconds=3600,
            fencing_token=1,
            executions=1,
            uncertain_since=now,
            classified_as="non_idempotent",
        )
        for i in range(count)
    ]
    return [r.pk for r in IdempotencyRecord.objects.bulk_create(records, batch_size=2000)]


QUEUE = "reconcile"


def hold(nodes: list[str]) -> None:
    """Stop the workers taking tasks (they stay up and connected), so that the backlog is
    queued before any look-up runs: queueing 3,000 tasks takes seconds of CPU, which would
    otherwise be taken from the workers being measured, more from two than from one."""
    _control("cancel_consumer", nodes)


def release(nodes: list[str]) -> None:
    """Let every held worker take tasks again, together."""
    _control("add_consumer", nodes)


def _control(command: str, nodes: list[str]) -> None:
    from console.celery import app

    replies = getattr(app.control, command)(QUEUE, destination=nodes, reply=True, timeout=5)
    answered = {node for reply in replies for node in reply}
    if answered != set(nodes):
        raise RuntimeError(f"{command}: {sorted(nodes)} asked, {sorted(answered)} answered")


def enqueue(ids: list[int]) -> float:
    """The records' look-ups on the broker, as the sweep sends them; the seconds it took."""
    from reconcile.tasks import send_lookups

    began = time.monotonic()
    send_lookups(ids)
    return time.monotonic() - began


def settle(ids: list[int], timeout: float) -> dict[str, Any]:
    """Wait until no record of the batch is unknown. The rate is read from the records
    themselves: how many settled between the first and the last settlement (``completed_at``),
    so neither the workers' start-up nor this polling counts."""
    # The records were bulk-created with consecutive ids: a range keeps the polling query
    # cheap, so the measurement takes little of the CPU it is measuring.
    assert max(ids) - min(ids) + 1 == len(ids), "the records' ids are not consecutive"
    batch = IdempotencyRecord.objects.filter(pk__gte=min(ids), pk__lte=max(ids))
    began = time.monotonic()
    left = len(ids)
    while time.monotonic() - began < timeout:
        left = batch.filter(state=RecordState.UNKNOWN).count()
        if left == 0:
            break
        time.sleep(0.25)
    span = batch.exclude(state=RecordState.UNKNOWN).aggregate(
        first=Min("completed_at"), last=Max("completed_at")
    )
    connection.close()
    seconds = (span["last"] - span["first"]).total_seconds() if span["first"] else 0.0
    return {"resolved": len(ids) - left, "settle_span_seconds": seconds}


def summary(workers: int, settled: dict[str, Any], total: int, enqueue_s: float) -> dict[str, Any]:
    resolved, seconds = settled["resolved"], settled["settle_span_seconds"]
    per_minute = (resolved - 1) / seconds * 60 if seconds else 0.0
    return {
        "workers": workers,
        "records": total,
        "resolved": resolved,
        "seconds": round(seconds, 2),
        "enqueue_seconds": round(enqueue_s, 2),
        "per_minute": round(per_minute),
        "per_minute_per_worker": round(per_minute / workers),
    }
