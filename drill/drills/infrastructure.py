"""Infrastructure faults, injected for real: ``kill -9`` of a Celery worker in the middle of a
look-up, Redis killed and restarted under load, and a gunicorn worker killed in the middle of
a request. Nothing may be lost and nothing executed twice."""

from __future__ import annotations

import threading
import time
from typing import Any

import psycopg

from drill.context import DrillContext
from drill.drills import Drill
from drill.report import DrillResult
from drill.stack import wait_for

GROUP = "infrastructure-faults"


def _one_per_key(ctx: DrillContext, service: str, keys: list[str]) -> dict[str, Any]:
    stats = ctx.stats(service)
    objects = {k: stats["per_reference"].get(k, 0) for k in keys}
    requests = {k: stats["create_requests_per_key"].get(k, 0) for k in keys}
    return {"objects": objects, "create_requests": requests}


def worker_killed_mid_task(ctx: DrillContext, result: DrillResult) -> None:
    """A look-up is slow; the worker doing it is killed with SIGKILL. The message is
    redelivered (acks_late) or the sweep re-enqueues it: the record settles once."""
    from ledger.models import AuditEvent, IdempotencyRecord

    ctx.arm(service="orders", mode="timeout_after_commit", hang_seconds=1.5)
    ctx.arm(service="orders", operation="lookup", mode="latency", latency_ms=3000)
    with ctx.client() as client, client.run(user_id="worker-kill") as run:
        result.add_run(run.run_id)
        obs = result.observe(
            "order",
            run.call(
                "create_order",
                {"cart": "kill-cart"},
                business_object_id="kill-cart",
                execute=ctx.create("orders", "worker_kill", timeout=0.5),
            ),
        )
        key = obs["metadata"]["idempotency_key"]
        victim: dict[str, Any] = {}

        def in_lookup() -> bool:
            victim["name"] = ctx.stack.worker_in_lookup()
            return victim["name"] is not None

        wait_for(in_lookup, timeout=20, what="a worker in the middle of the look-up", step=0.05)
        name = str(victim["name"])
        ctx.stack.processes[name].kill9()
        result.facts["killed_worker"] = name
        result.facts["state_after_kill"] = (client.lookup(key) or {}).get("state")
        replacement = ctx.stack.start_worker()  # what the supervisor does
        ctx.stack.wait_worker_ready(replacement)
        result.facts["replacement_worker"] = replacement
        record = ctx.wait_records(client, [key], timeout=60)[key]
    record_pk = IdempotencyRecord.objects.filter(key=key).values_list("pk", flat=True).first()
    resolutions = AuditEvent.objects.filter(
        action="record.resolved_succeeded", target_id=str(record_pk)
    ).count()
    result.facts["resolutions"] = resolutions
    counts = _one_per_key(ctx, "orders", [key])
    result.check("the call was uncertain", obs["code"] == "SIDE_EFFECT_UNCERTAIN", obs)
    result.check(
        "the record stayed unknown after the kill",
        result.facts["state_after_kill"] == "unknown",
        result.facts,
    )
    result.check(
        "settled to succeeded after the kill",
        record is not None and record["state"] == "succeeded",
        record,
    )
    result.check("executed once", record is not None and record["executions"] == 1, record)
    result.check("resolved exactly once", resolutions == 1, resolutions)
    result.check(
        "one order, one create request",
        counts["objects"][key] == 1 and counts["create_requests"][key] == 1,
        counts,
    )


def redis_restarted_under_load(ctx: DrillContext, result: DrillResult) -> None:
    """Four agents keep ordering (a third of the orders time out after committing) while
    Redis is killed and started again. The API keeps answering, and every unknown outcome is
    still reconciled afterwards (PostgreSQL is the source of truth)."""
    stop = threading.Event()
    lock = threading.Lock()
    observations: list[tuple[str, dict[str, Any], float]] = []
    errors: list[str] = []
    phase = {"name": "before"}

    def agent(index: int) -> None:
        try:
            with ctx.client(agent=f"load-{index}") as client:
                run = client.start_run(user_id=f"load-{index}")
                with lock:
                    result.add_run(run.run_id)
                n = 0
                while not stop.is_set():
                    n += 1
                    slow = n % 3 == 0
                    began = time.monotonic()
                    obs = run.call(
                        "create_order",
                        {"cart": f"load-{index}-{n}"},
                        business_object_id=f"load-{index}-{n}",
                        execute=ctx.create(
                            "orders",
                            f"load-{index}-{n}",
                            timeout=0.5,
                            before=(
                                lambda c: ctx.arm(
                                    service="orders", mode="timeout_after_commit", hang_seconds=1
                                )
                            )
                            if slow
                            else None,
                        ),
                        timeout=0.5,
                    )
                    with lock:
                        observations.append((phase["name"], obs, time.monotonic() - began))
                run.finish("completed")
        except Exception as exc:
            errors.append(f"agent {index}: {exc!r}")

    agents = [threading.Thread(target=agent, args=(i,), daemon=True) for i in range(4)]
    for thread in agents:
        thread.start()
    time.sleep(3)
    phase["name"] = "redis down"
    ctx.stack.kill_redis()
    time.sleep(4)
    ctx.stack.start_redis()
    phase["name"] = "after"
    time.sleep(3)
    stop.set()
    for thread in agents:
        thread.join(60)
    keys = []
    for name, obs, _seconds in observations:
        result.observe(name, obs)
        keys.append(obs["metadata"]["idempotency_key"])
    with ctx.client() as client:
        records = ctx.wait_records(client, keys, timeout=90)
    during = [(obs, s) for name, obs, s in observations if name == "redis down"]
    states: dict[str, int] = {}
    for record in records.values():
        state = record["state"] if record else "missing"
        states[state] = states.get(state, 0) + 1
    counts = _one_per_key(ctx, "orders", keys)
    result.facts.update(
        calls=len(observations),
        calls_while_redis_down=len(during),
        slowest_call_while_down=round(max((s for _o, s in during), default=0.0), 2),
        uncertain_while_down=sum(1 for o, _s in during if o.get("code") == "SIDE_EFFECT_UNCERTAIN"),
        final_states=states,
        errors=errors,
    )
    result.check("the agents never crashed", not errors, errors)
    result.check("calls were answered while Redis was down", len(during) > 0, len(during))
    result.check(
        "some outcomes were unknown while Redis was down",
        result.facts["uncertain_while_down"] > 0,
        result.facts,
    )
    result.check(
        "every call is recorded and settled (nothing lost)",
        states == {"succeeded": len(keys)},
        states,
    )
    result.check("one order per key", set(counts["objects"].values()) == {1}, counts["objects"])
    result.check(
        "one create request per key (nothing executed twice)",
        set(counts["create_requests"].values()) == {1},
        counts["create_requests"],
    )


class RowLock:
    """Holds an idempotency record's row lock from outside the stack, so a web request that
    needs the row waits: it is really in flight when its worker is killed."""

    def __init__(self, ctx: DrillContext) -> None:
        self.url = ctx.stack.database_url.replace("postgres://", "postgresql://")
        self.conn: psycopg.Connection[Any] | None = None
        self.activity: list[list[str]] = []

    def hold(self, key: str) -> None:
        self.conn = psycopg.connect(self.url)
        self.conn.execute(
            "SELECT 1 FROM ledger_idempotencyrecord WHERE key = %s FOR UPDATE", (key,)
        )

    def someone_waits(self) -> bool:
        """A web process's query is waiting for a row lock."""
        with psycopg.connect(self.url, autocommit=True) as probe:
            rows = probe.execute(
                "SELECT pid, wait_event_type, wait_event, left(query, 120) FROM pg_stat_activity "
                "WHERE datname = current_database() AND pid <> pg_backend_pid() "
                "AND state = 'active'"
            ).fetchall()
        self.activity = [list(map(str, row)) for row in rows]
        return any(row[1] == "Lock" for row in rows)

    def release(self) -> None:
        if self.conn is not None:
            self.conn.rollback()
            self.conn.close()
            self.conn = None


def _kill_the_serving_worker(ctx: DrillContext, lock: RowLock, result: DrillResult) -> list[int]:
    """Wait until a request waits on ``lock``, SIGKILL the gunicorn worker serving it, and let
    the lock go. Returns the killed pids."""
    try:
        try:
            wait_for(lock.someone_waits, timeout=20, what="the request to be in flight")
        finally:
            result.facts["database_activity"] = lock.activity
        result.facts["web_workers_before"] = ctx.stack.web_worker_pids()
        serving = ctx.stack.web_workers_serving()
        for pid in serving:
            ctx.stack.kill_pid(pid)
        result.facts["killed_pids"] = serving
    finally:
        lock.release()
    before = set(result.facts["web_workers_before"])

    def replaced() -> bool:
        now = set(ctx.stack.web_worker_pids())
        return len(now) >= 2 and not now & set(serving) and bool(now - before)

    wait_for(replaced, timeout=30, what="gunicorn to replace the killed worker")
    result.facts["web_workers_after"] = ctx.stack.web_worker_pids()
    return serving


def _replaced(result: DrillResult) -> None:
    before, after = result.facts["web_workers_before"], result.facts["web_workers_after"]
    result.check(
        "gunicorn replaced the killed worker",
        len(set(after) - set(before)) >= 1,
        {"before": before, "after": after},
    )


def web_worker_killed_mid_report(ctx: DrillContext, result: DrillResult) -> None:
    """The order is placed; while the runtime reports it, the gunicorn worker serving that
    report is killed with SIGKILL. The client's retry reaches another worker: the success is
    recorded, and the order is not placed again."""
    lock = RowLock(ctx)
    outcome: dict[str, Any] = {}
    with ctx.client() as client, client.run(user_id="web-kill") as run:
        result.add_run(run.run_id)

        def place() -> None:
            outcome["obs"] = run.call(
                "create_order",
                {"cart": "web-kill-cart"},
                business_object_id="web-kill-cart",
                # The order is committed downstream; lock the record before the report comes.
                execute=ctx.create(
                    "orders", "web_kill", after=lambda c: lock.hold(c.idempotency_key)
                ),
            )

        caller = threading.Thread(target=place, daemon=True)
        caller.start()
        wait_for(lambda: lock.conn is not None, timeout=20, what="the order to be placed")
        serving = _kill_the_serving_worker(ctx, lock, result)
        caller.join(60)
        obs = result.observe("order", outcome.get("obs") or {})
        key = obs.get("metadata", {}).get("idempotency_key", "")
        record = client.lookup(key) if key else None
    counts = _one_per_key(ctx, "orders", [key])
    result.check("a worker was killed while serving the report", len(serving) >= 1, serving)
    result.check("the runtime got the order", obs.get("ok") is True, obs)
    result.check(
        "the success was recorded once",
        record is not None and record["state"] == "succeeded" and record["executions"] == 1,
        record,
    )
    result.check(
        "one order, one create request",
        counts["objects"].get(key) == 1 and counts["create_requests"].get(key) == 1,
        counts,
    )
    _replaced(result)


def web_worker_killed_mid_call(ctx: DrillContext, result: DrillResult) -> None:
    """The model asks for an order that was already placed; the gunicorn worker deciding that
    duplicate is killed with SIGKILL. The client sends the call again under the same key (it
    retries what got no answer, within its time budget) and gets the recorded order, or, with
    no answer in time, fails closed; either way the tool does not run again. Asked again, the
    ledger returns the recorded order."""
    lock = RowLock(ctx)
    label = "web_kill_call"
    tool = ctx.create("orders", label)
    args: dict[str, Any] = {"business_object_id": "web-kill-call", "execute": tool}
    outcome: dict[str, Any] = {}
    with ctx.client() as client, client.run(user_id="web-kill-call") as run:
        result.add_run(run.run_id)
        first = result.observe("order", run.call("create_order", {"cart": "wkc"}, **args))
        key = first["metadata"]["idempotency_key"]
        lock.hold(key)

        def duplicate() -> None:
            outcome["obs"] = run.call("create_order", {"cart": "wkc"}, **args)

        caller = threading.Thread(target=duplicate, daemon=True)
        caller.start()
        serving = _kill_the_serving_worker(ctx, lock, result)
        caller.join(60)
        cut_off = result.observe("duplicate, worker killed", outcome.get("obs") or {})
        again = result.observe("asked again", run.call("create_order", {"cart": "wkc"}, **args))
        record = client.lookup(key)
    counts = _one_per_key(ctx, "orders", [key])
    result.check("a worker was killed while deciding the duplicate", len(serving) >= 1, serving)
    result.check(
        "the cut-off call got the recorded order or failed closed, never a new execution",
        (cut_off.get("ok") is True and cut_off["metadata"].get("replayed") is True)
        or (cut_off.get("code") == "LEDGER_UNAVAILABLE" and cut_off.get("ok") is False),
        cut_off,
    )
    result.check(
        "asked again: the recorded order",
        again.get("ok") is True and again["metadata"].get("replayed") is True,
        again,
    )
    result.check("the tool ran once", ctx.ran(label) == 1, ctx.ran(label))
    result.check(
        "one execution in the ledger",
        record is not None and record["state"] == "succeeded" and record["executions"] == 1,
        record,
    )
    result.check(
        "one order, one create request",
        counts["objects"].get(key) == 1 and counts["create_requests"].get(key) == 1,
        counts,
    )
    _replaced(result)


DRILLS = [
    Drill(
        "worker_kill9_mid_task",
        GROUP,
        "kill -9 of a Celery worker in the middle of a look-up",
        worker_killed_mid_task,
    ),
    Drill(
        "redis_restart_under_load",
        GROUP,
        "Redis killed and restarted while agents call",
        redis_restarted_under_load,
    ),
    Drill(
        "web_worker_kill9_mid_report",
        GROUP,
        "kill -9 of the gunicorn worker recording a call's outcome",
        web_worker_killed_mid_report,
    ),
    Drill(
        "web_worker_kill9_mid_call",
        GROUP,
        "kill -9 of the gunicorn worker deciding a duplicate call",
        web_worker_killed_mid_call,
    ),
]
