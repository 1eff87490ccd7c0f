"""Unknown records resolved per minute per worker, against the sandbox at 50 ms latency."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Any

import httpx
from django.db import connection

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


def drain(ids: list[int], timeout: float) -> tuple[float, int]:
    """Enqueue a look-up per record and wait until none is unknown; (seconds, resolved)."""
    from reconcile.tasks import reconcile_record

    began = time.monotonic()
    for record_id in ids:
        reconcile_record.delay(record_id)
    left = len(ids)
    # The records were bulk-created with consecutive ids: a range keeps the polling query
    # cheap, so the measurement takes little of the CPU it is measuring.
    assert max(ids) - min(ids) + 1 == len(ids), "the records' ids are not consecutive"
    batch = IdempotencyRecord.objects.filter(pk__gte=min(ids), pk__lte=max(ids))
    while time.monotonic() - began < timeout:
        left = batch.filter(state=RecordState.UNKNOWN).count()
        if left == 0:
            break
        time.sleep(0.25)
    connection.close()
    return time.monotonic() - began, len(ids) - left


def summary(workers: int, seconds: float, resolved: int, total: int) -> dict[str, Any]:
    per_minute = resolved / seconds * 60 if seconds else 0.0
    return {
        "workers": workers,
        "records": total,
        "resolved": resolved,
        "seconds": round(seconds, 2),
        "per_minute": round(per_minute),
        "per_minute_per_worker": round(per_minute / workers),
    }
