"""Seed 001's hard acceptance and its concurrency drill."""

from __future__ import annotations

import threading
import time
from typing import Any

from django.db import connections
from django.utils import timezone

from drill.context import DrillContext
from drill.drills import Drill
from drill.report import DrillResult

GROUP = "seed-001-acceptance"
EXPLAINABLE = {"SIDE_EFFECT_UNCERTAIN", "IN_PROGRESS"}


def _explainable(observation: dict[str, Any]) -> bool:
    """A result the model can act on: the (original) result, or a code that says what to do."""
    if not observation.get("content") or not observation["metadata"].get("idempotency_key"):
        return False
    return observation["ok"] is True or observation.get("code") in EXPLAINABLE


def ten_retries_after_a_timeout(ctx: DrillContext, result: DrillResult) -> None:
    """After a timeout (the downstream committed), ten retries in a row: one record downstream."""
    label = "hard_acceptance"
    ctx.arm(service="orders", mode="timeout_after_commit", hang_seconds=1.5)
    tool = ctx.create("orders", label, timeout=0.5)
    observations = []
    with ctx.client() as client, client.run(user_id="hard-acceptance") as run:
        result.add_run(run.run_id)
        for attempt in range(11):  # the first call and ten retries
            observations.append(
                result.observe(
                    f"attempt-{attempt}",
                    run.call(
                        "create_order",
                        {"cart": "ha-cart"},
                        business_object_id="ha-cart",
                        execute=tool,
                        timeout=0.5,
                    ),
                )
            )
        key = observations[0]["metadata"]["idempotency_key"]
        record = ctx.wait_records(client, [key])[key]
    orders = ctx.stats("orders")
    result.check(
        "the first call timed out: SIDE_EFFECT_UNCERTAIN",
        observations[0]["code"] == "SIDE_EFFECT_UNCERTAIN",
        observations[0],
    )
    result.check("every answer is explainable", all(map(_explainable, observations)))
    result.check("the tool ran once", ctx.ran(label) == 1, ctx.ran(label))
    result.check(
        "exactly one record downstream",
        orders["per_reference"].get(key) == 1,
        orders["per_reference"].get(key),
    )
    result.check(
        "one create request downstream",
        orders["create_requests_per_key"].get(key) == 1,
        orders["create_requests_per_key"].get(key),
    )
    result.check(
        "the ledger: one execution, ten duplicate hits",
        record is not None and (record["executions"], record["duplicate_hits"]) == (1, 10),
        record,
    )
    result.check(
        "reconciled to succeeded", record is not None and record["state"] == "succeeded", record
    )


def ten_callers_share_a_key(ctx: DrillContext, result: DrillResult) -> None:
    """Ten requests share a key; the downstream commits and the connection is cut before the
    response. One business object, an explainable answer for every caller, and a TTL cleanup
    running throughout deletes nothing that is still in flight."""
    from ledger.models import IdempotencyRecord
    from ledger.services.cleanup import cleanup_expired_records

    label = "concurrency"
    key_box: dict[str, str] = {}
    # The order commits, then the connection hangs and is cut before the response; the first
    # look-up is slow, so the record stays in flight (executing, then unknown) for a while.
    ctx.arm(service="orders", mode="timeout_after_commit", hang_seconds=1.0)
    ctx.arm(service="orders", operation="lookup", mode="latency", latency_ms=1500)
    tool = ctx.create(
        "orders", label, timeout=0.5, before=lambda c: key_box.setdefault("key", c.idempotency_key)
    )
    observations: list[dict[str, Any]] = []
    errors: list[str] = []
    with ctx.client() as client:
        run = client.start_run(user_id="concurrency")
        run_id = run.run_id
        result.add_run(run_id)
        barrier = threading.Barrier(10)

        def caller(index: int) -> None:
            try:
                with ctx.client(agent=f"caller-{index}") as own:
                    barrier.wait(10)
                    obs = own.call(
                        run_id,
                        "create_order",
                        {"cart": "shared-cart"},
                        business_object_id="shared-cart",
                        execute=tool,
                        timeout=0.5,
                        wait_deadline=40,
                    )
                    observations.append(obs)
            except Exception as exc:
                errors.append(f"caller {index}: {exc!r}")

        # The janitor: the TTL cleanup, in a loop for the whole drill. While the record is in
        # flight it must never delete it; once every caller has its answer, the record's TTL is
        # made to pass, and then it must delete it (so the janitor was really able to).
        stop = threading.Event()
        expire_now = threading.Event()
        janitor: dict[str, Any] = {"ticks_in_flight": 0, "deleted_in_flight": 0, "deleted": 0}

        def clean() -> None:
            try:
                while not stop.is_set():
                    key = key_box.get("key")
                    if key:
                        rows = IdempotencyRecord.objects.filter(key=key)
                        if expire_now.is_set():
                            rows.filter(state="succeeded").update(expires_at=timezone.now())
                        before = rows.values_list("state", flat=True).first()
                        janitor["deleted"] += cleanup_expired_records()
                        after = rows.values_list("state", flat=True).first()
                        if before in ("reserved", "executing", "unknown"):
                            janitor["ticks_in_flight"] += 1
                            if after is None:
                                janitor["deleted_in_flight"] += 1
                        if before == "succeeded" and after is None:
                            janitor["deleted_after_settling"] = True
                            return
                    time.sleep(0.05)
            finally:
                connections.close_all()

        cleaner = threading.Thread(target=clean, daemon=True)
        cleaner.start()
        callers = [threading.Thread(target=caller, args=(i,), daemon=True) for i in range(10)]
        for thread in callers:
            thread.start()
        for thread in callers:
            thread.join(60)
        key = key_box.get("key", "")
        record = ctx.wait_records(client, [key])[key] if key else None
        if record is not None:  # kept now: the janitor deletes the record below
            result.records[key] = {
                "state": record["state"],
                "executions": record["executions"],
                "duplicate_hits": record["duplicate_hits"],
                "tool": record["tool"],
            }
        expire_now.set()
        cleaner.join(15)
        stop.set()
        cleaner.join(5)
        run.finish("completed")
    for index, obs in enumerate(observations):
        result.observe(f"caller-{index}", obs)
    result.facts["janitor"] = janitor
    result.facts["caller_errors"] = errors
    orders = ctx.stats("orders")
    codes = sorted(str(o.get("code") if not o["ok"] else "ok") for o in observations)
    result.facts["answers"] = codes
    result.check("ten callers answered", len(observations) == 10 and not errors, errors)
    result.check(
        "every caller has an explainable answer", all(map(_explainable, observations)), codes
    )
    result.check("the tool ran once", ctx.ran(label) == 1, ctx.ran(label))
    result.check(
        "exactly one business object",
        orders["per_reference"].get(key) == 1,
        orders["per_reference"].get(key),
    )
    result.check(
        "reconciled to succeeded with one execution",
        record is not None and record["state"] == "succeeded" and record["executions"] == 1,
        record,
    )
    result.check(
        "cleanup ran while the record was in flight", janitor["ticks_in_flight"] > 0, janitor
    )
    result.check("cleanup deleted nothing in flight", janitor["deleted_in_flight"] == 0, janitor)
    result.check(
        "cleanup deleted the record once it had settled and expired",
        janitor.get("deleted_after_settling") is True,
        janitor,
    )


DRILLS = [
    Drill(
        "hard_acceptance_ten_retries",
        GROUP,
        "timeout after the downstream committed, ten retries in a row, one downstream record",
        ten_retries_after_a_timeout,
    ),
    Drill(
        "concurrency_ten_callers_one_key",
        GROUP,
        "ten requests share a key, connection cut after downstream success",
        ten_callers_share_a_key,
    ),
]
