"""Reconciliation with real `celery worker` processes on real Redis and PostgreSQL."""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from django.db import connections
from django.utils import timezone

from agent_ledger_client import CallContext, LedgerClient
from console.celery import app as celery_app
from ledger.domain import TERMINAL_RECORD_STATES, RecordState
from ledger.models import ApiToken, AuditEvent, IdempotencyRecord, Tenant
from ledger.records import Outcome, complete_execution
from ledger.services.cleanup import cleanup_expired_records
from reconcile.models import DownstreamAdapter, ReconcileAttempt
from reconcile.tasks import reconcile_records, schedule_reconciliation, sweep_expired_leases
from sandbox.server import SandboxServer
from tests.factories import make_tool, reserve
from tests.processes import RedisServer, Worker, celery_worker
from tests.sandbox_fixtures import arm

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def wait_until(
    condition: Callable[[], bool],
    *,
    timeout: float,
    step: float = 0.25,
    tick: Callable[[], object] | None = None,
) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("timed out waiting")
        if tick is not None:
            tick()
        time.sleep(step)


def unknown_left() -> int:
    return IdempotencyRecord.objects.filter(state=RecordState.UNKNOWN).count()


def _setup(sandbox: SandboxServer, *, grace: int = 0) -> tuple[Tenant, object]:
    tenant = Tenant.objects.create(slug="acme", name="Acme")
    tool = make_tool(tenant, "create_order")
    DownstreamAdapter.objects.create(
        tenant=tenant,
        tool=tool,
        url_template=f"{sandbox.url}/orders/objects/by-key/{{key}}",
        found_statuses=[200],
        not_found_statuses=[404],
        grace_seconds=grace,
    )
    return tenant, tool


def test_every_task_has_a_named_queue() -> None:
    ours = [name for name in celery_app.tasks if name.startswith("reconcile.")]
    assert ours
    routes = celery_app.conf.task_routes
    assert {name: routes[name]["queue"] for name in ours} == {
        "reconcile.tasks.reconcile_records": "reconcile",
        "reconcile.tasks.schedule_reconciliation": "maintenance",
        "reconcile.tasks.sweep_expired_leases": "maintenance",
        "reconcile.tasks.cleanup_expired": "maintenance",
        "reconcile.tasks.roll_up_metrics": "maintenance",
        "reconcile.tasks.sweep_notifications": "maintenance",
        "reconcile.tasks.deliver_notification": "notify",
        "reconcile.tasks.run_compensations": "reconcile",
        "reconcile.tasks.compensate_run": "reconcile",
        "reconcile.tasks.sweep_compensations": "maintenance",
        "reconcile.tasks.apply_approved_writes": "reconcile",
        "reconcile.tasks.snapshot_write_conflicts": "reconcile",
        "reconcile.tasks.evaluate_rollouts": "maintenance",
        "reconcile.tasks.seal_audit_chains": "maintenance",
    }


def test_the_demos_worker_consumes_every_queue_a_task_is_routed_to() -> None:
    """make run's one worker stands for all of production's: a queue it does not read is work
    the demo never does (on-call deliveries, were notify left out)."""
    from console.demo_stack import WORKER_OPTIONS

    read = set(WORKER_OPTIONS[WORKER_OPTIONS.index("-Q") + 1].split(","))
    assert {route["queue"] for route in celery_app.conf.task_routes.values()} <= read


def test_two_workers_on_one_backlog_look_each_record_up_once(
    sandbox: SandboxServer, broker: RedisServer, tmp_path: Path
) -> None:
    tenant, tool = _setup(sandbox)
    arm(sandbox, service="orders", operation="lookup", mode="latency", latency_ms=50, count=1000)
    with celery_worker("w1", broker.url, tmp_path), celery_worker("w2", broker.url, tmp_path):
        for i in range(40):  # each commit enqueues one look-up; both workers are waiting
            record = reserve(tenant, tool, key=f"key-{i}").record
            if i % 2 == 0:  # half of them did happen downstream
                httpx.post(
                    f"{sandbox.url}/orders/objects",
                    json={"reference": f"r{i}"},
                    headers={"Idempotency-Key": record.key},
                )
            complete_execution(
                record=record, fencing_token=1, outcome=Outcome.UNCERTAIN, actor="runtime"
            )
        wait_until(lambda: unknown_left() == 0, timeout=90)
    states = Counter(IdempotencyRecord.objects.values_list("state", flat=True))
    assert states == {"succeeded": 20, "failed_final": 20}
    per_record = Counter(ReconcileAttempt.objects.values_list("record_id", flat=True))
    assert set(per_record.values()) == {1} and len(per_record) == 40
    lookups = httpx.get(f"{sandbox.url}/orders/stats").json()["lookups_per_key"]
    assert set(lookups.values()) == {1} and len(lookups) == 40
    # Both workers took part: the backlog really was shared.
    assert len(set(ReconcileAttempt.objects.values_list("worker", flat=True))) == 2


def _lapsed_leases(tenant: Tenant, tool: object, count: int) -> list[IdempotencyRecord]:
    """Executing records whose lease has lapsed: the lease sweep makes them unknown."""
    records = [reserve(tenant, tool, key=f"lapsed-{i}").record for i in range(count)]
    IdempotencyRecord.objects.filter(pk__in=[r.pk for r in records]).update(
        lease_expires_at=timezone.now() - timedelta(seconds=5)
    )
    return records


def _messages_received(worker: Worker) -> int:
    return sum(
        "reconcile_records[" in line and "received" in line
        for line in worker.log.read_text().splitlines()
    )


def test_a_sweep_sends_its_look_ups_several_records_to_a_message(
    sandbox: SandboxServer, broker: RedisServer, tmp_path: Path, settings: Any
) -> None:
    settings.RECONCILE_TASK_RECORDS = 10
    tenant, tool = _setup(sandbox)
    records = _lapsed_leases(tenant, tool, 25)
    with celery_worker("batches", broker.url, tmp_path) as worker:
        assert sweep_expired_leases() == 25  # one batch: its look-ups are sent on commit
        wait_until(lambda: unknown_left() == 0, timeout=60)
    assert _messages_received(worker) == 3  # 10 + 10 + 5
    per_record = Counter(ReconcileAttempt.objects.values_list("record_id", flat=True))
    assert per_record == {record.pk: 1 for record in records}
    lookups = httpx.get(f"{sandbox.url}/orders/stats").json()["lookups_per_key"]
    assert sorted(lookups) == sorted(r.key for r in records) and set(lookups.values()) == {1}


def test_a_task_hands_the_records_past_its_time_budget_to_a_new_message(
    sandbox: SandboxServer,
    broker: RedisServer,
    tmp_path: Path,
    settings: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Eight look-ups of 600 ms in one message would run past its soft limit of 4 s: the task
    takes records only while less than half of it has passed and sends the rest on, so none of
    them times out."""
    # Time limits travel in the message, from the task as the publisher defines it.
    monkeypatch.setattr(reconcile_records, "soft_time_limit", 4)
    monkeypatch.setattr(reconcile_records, "time_limit", 20)
    monkeypatch.setattr(reconcile_records, "_exec_options", None)  # Celery caches them
    settings.RECONCILE_TASK_RECORDS = 8
    tenant, tool = _setup(sandbox)
    records = _lapsed_leases(tenant, tool, 8)
    arm(sandbox, service="orders", operation="lookup", mode="latency", latency_ms=600, count=100)
    with celery_worker("budget", broker.url, tmp_path) as worker:
        sweep_expired_leases()
        wait_until(lambda: unknown_left() == 0, timeout=60)
    assert 2 <= _messages_received(worker) < 8
    outcomes = Counter(ReconcileAttempt.objects.values_list("outcome", flat=True))
    assert outcomes == {"not_found": 8}
    per_record = Counter(ReconcileAttempt.objects.values_list("record_id", flat=True))
    assert per_record == {record.pk: 1 for record in records}


def _sessions_opened() -> int:
    """Connections ever opened to the test database (PostgreSQL's own count)."""
    with connections["default"].cursor() as cursor:
        cursor.execute("SELECT sessions FROM pg_stat_database WHERE datname = current_database()")
        row = cursor.fetchone()
    assert row is not None
    return int(row[0])


def test_a_worker_keeps_its_database_connection_from_one_look_up_to_the_next(
    sandbox: SandboxServer, broker: RedisServer, tmp_path: Path
) -> None:
    """Celery's Django fixup would close the connection around every task: a new PostgreSQL
    connection for every look-up (console/celery.py)."""
    tenant, tool = _setup(sandbox)
    with celery_worker("steady", broker.url, tmp_path):
        before = _sessions_opened()
        for i in range(30):
            record = reserve(tenant, tool, key=f"steady-{i}").record
            complete_execution(
                record=record, fencing_token=1, outcome=Outcome.UNCERTAIN, actor="runtime"
            )
        wait_until(lambda: unknown_left() == 0, timeout=60)
        time.sleep(1.5)  # a backend reports its statistics at most once a second
        opened = _sessions_opened() - before
        # The kept connection dies (a PostgreSQL restart, a failover): the next look-up finds
        # it dead before relying on it, and reconnects.
        with connections["default"].cursor() as cursor:
            cursor.execute(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                "WHERE datname = current_database() AND pid <> pg_backend_pid()"
            )
            assert cursor.fetchone() == (1,)  # the worker's one connection
        for i in range(30, 35):
            record = reserve(tenant, tool, key=f"steady-{i}").record
            complete_execution(
                record=record, fencing_token=1, outcome=Outcome.UNCERTAIN, actor="runtime"
            )
        wait_until(lambda: unknown_left() == 0, timeout=60)
    assert ReconcileAttempt.objects.count() == 35
    assert opened <= 3, f"{opened} connections opened for 30 look-ups"


def test_kill_9_mid_task_is_redelivered_with_the_same_outcome(
    sandbox: SandboxServer, broker: RedisServer, tmp_path: Path
) -> None:
    tenant, tool = _setup(sandbox)
    record = reserve(tenant, tool, key="key-kill").record
    httpx.post(
        f"{sandbox.url}/orders/objects",
        json={"reference": "r"},
        headers={"Idempotency-Key": record.key},
    )
    arm(sandbox, service="orders", operation="lookup", mode="latency", latency_ms=8000)
    fast_recovery = {
        "CELERY_VISIBILITY_TIMEOUT": "3",
        "RECONCILE_CLAIM_SECONDS": "5",
        "RECONCILE_TASK_SOFT_TIME_LIMIT": "2",
        "RECONCILE_TASK_TIME_LIMIT": "4",
    }
    with celery_worker("doomed", broker.url, tmp_path, env=fast_recovery) as doomed:
        complete_execution(
            record=record, fencing_token=1, outcome=Outcome.UNCERTAIN, actor="runtime"
        )
        lookups = lambda: httpx.get(f"{sandbox.url}/orders/stats").json()["lookups_per_key"]  # noqa: E731
        wait_until(lambda: lookups().get(record.key) == 1, timeout=30)
        doomed.kill9()  # in the middle of the slow look-up
    assert IdempotencyRecord.objects.get(pk=record.pk).state == RecordState.UNKNOWN
    with celery_worker("survivor", broker.url, tmp_path, env=fast_recovery):
        wait_until(lambda: unknown_left() == 0, timeout=60, step=1.0, tick=schedule_reconciliation)
    settled = IdempotencyRecord.objects.get(pk=record.pk)
    assert settled.state == RecordState.SUCCEEDED and settled.executions == 1
    assert AuditEvent.objects.filter(action="record.resolved_succeeded").count() == 1
    assert httpx.get(f"{sandbox.url}/orders/stats").json()["objects"] == 1


def _client_for_new_tenant(live_server, sandbox: SandboxServer) -> LedgerClient:
    tenant, _tool = _setup(sandbox)
    _token, plaintext = ApiToken.issue(tenant=tenant, name="runtime")
    return LedgerClient(live_server.url, plaintext, request_timeout=10)


def _create_order(sandbox: SandboxServer) -> Callable[[CallContext], object]:
    def execute(ctx: CallContext) -> object:
        response = httpx.post(
            f"{sandbox.url}/orders/objects",
            json={"reference": ctx.step_id},
            headers={"Idempotency-Key": ctx.idempotency_key},
            timeout=0.5,
        )
        response.raise_for_status()
        return response.json()

    return execute


def test_api_keeps_answering_while_redis_is_down_and_nothing_is_lost(
    live_server,
    sandbox: SandboxServer,
    broker: RedisServer,
    tmp_path: Path,
    settings,
) -> None:
    settings.RECONCILE_REQUEUE_SECONDS = 2
    client = _client_for_new_tenant(live_server, sandbox)
    run = client.start_run(user_id="u1")
    arm(sandbox, service="orders", mode="timeout_after_commit", hang_seconds=1, count=1000)
    with celery_worker("w1", broker.url, tmp_path):
        for i in range(3):
            run.call(
                "create_order",
                {"n": i},
                business_object_id=f"before-{i}",
                execute=_create_order(sandbox),
            )
        wait_until(lambda: unknown_left() == 0, timeout=60)
        broker.stop()
        for i in range(5):
            started = time.monotonic()
            observation = run.call(
                "create_order",
                {"n": i},
                business_object_id=f"during-{i}",
                execute=_create_order(sandbox),
            )
            assert observation["code"] == "SIDE_EFFECT_UNCERTAIN"
            assert time.monotonic() - started < 8  # the broker outage does not stall the API
        assert unknown_left() == 5
        broker.start()
        wait_until(lambda: unknown_left() == 0, timeout=90, step=1.0, tick=schedule_reconciliation)
    states = Counter(IdempotencyRecord.objects.values_list("state", flat=True))
    assert states == {"succeeded": 8}
    stats = httpx.get(f"{sandbox.url}/orders/stats").json()
    assert stats["objects"] == 8 and stats["max_per_key"] == 1
    client.close()


def test_seed_001_concurrency_drill(
    live_server,
    sandbox: SandboxServer,
    broker: RedisServer,
    tmp_path: Path,
    settings,
) -> None:
    """Ten requests share a key; the downstream commits and the connection is cut before the
    response. One business object, an explainable answer for everyone, and a cleanup running
    until the record is settled deletes nothing in flight."""
    # Finished records expire after 2 s, so a record the janitor found terminal and expired
    # would be deleted at once: "deleted nothing" means it never touched the record in flight.
    # The janitor stops once the record is terminal: a settled record may be deleted after its
    # TTL, and a TTL shorter than the callers' wait is outside what the runbook allows.
    settings.LEDGER_DEFAULT_TTL_SECONDS = 2
    client = _client_for_new_tenant(live_server, sandbox)
    run = client.start_run(user_id="u1")
    arm(sandbox, service="orders", mode="timeout_after_commit", hang_seconds=1)
    observations: list[dict] = []
    deleted: list[int] = []
    stop = threading.Event()

    def caller() -> None:
        try:
            observations.append(
                run.call(
                    "create_order",
                    {"cart": "cart-1"},
                    business_object_id="cart-1",
                    execute=_create_order(sandbox),
                    wait_deadline=20,
                )
            )
        finally:
            connections.close_all()

    def settled() -> bool:
        return IdempotencyRecord.objects.filter(state__in=TERMINAL_RECORD_STATES).exists()

    def janitor() -> None:
        try:
            while not stop.is_set() and not settled():
                deleted.append(cleanup_expired_records())
                time.sleep(0.05)
        finally:
            connections.close_all()

    with celery_worker("w1", broker.url, tmp_path):
        cleaner = threading.Thread(target=janitor)
        cleaner.start()
        callers = [threading.Thread(target=caller) for _ in range(10)]
        for thread in callers:
            thread.start()
        for thread in callers:
            thread.join(60)
        wait_until(lambda: unknown_left() == 0, timeout=60, tick=schedule_reconciliation)
        stop.set()
        cleaner.join(10)
    assert len(observations) == 10
    for observation in observations:
        explainable = observation["ok"] or observation["code"] in {
            "SIDE_EFFECT_UNCERTAIN",
            "IN_PROGRESS",
        }
        assert explainable and observation["content"], observation
    stats = httpx.get(f"{sandbox.url}/orders/stats").json()
    assert stats["objects"] == 1 and stats["per_reference"] == {stats_ref(stats): 1}
    record = IdempotencyRecord.objects.get()
    assert record.state == RecordState.SUCCEEDED and record.executions == 1
    assert sum(deleted) == 0
    client.close()


def stats_ref(stats: dict) -> str:
    return next(iter(stats["per_reference"]))


def test_a_look_up_past_the_task_time_limit_is_a_timeout_tried_again(
    sandbox: SandboxServer, broker: RedisServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Time limits travel in the message, from the task as the publisher defines it.
    monkeypatch.setattr(reconcile_records, "soft_time_limit", 2)
    monkeypatch.setattr(reconcile_records, "time_limit", 20)
    monkeypatch.setattr(reconcile_records, "_exec_options", None)  # Celery caches them
    tenant, tool = _setup(sandbox)
    DownstreamAdapter.objects.filter(tool=tool).update(timeout_seconds=30)
    record = reserve(tenant, tool, key="key-slow").record
    arm(sandbox, service="orders", operation="lookup", mode="latency", latency_ms=10_000)
    with celery_worker("slow", broker.url, tmp_path, env={"RECONCILE_TASK_SOFT_TIME_LIMIT": "2"}):
        complete_execution(
            record=record, fencing_token=1, outcome=Outcome.UNCERTAIN, actor="runtime"
        )
        wait_until(lambda: ReconcileAttempt.objects.filter(record=record).exists(), timeout=30)
    attempt = ReconcileAttempt.objects.get(record=record)
    assert attempt.outcome == "timeout" and "time limit" in attempt.detail
    waiting = IdempotencyRecord.objects.get(pk=record.pk)
    assert waiting.state == RecordState.UNKNOWN and waiting.next_reconcile_at is not None
    assert waiting.reconcile_claimed_until is None
