"""Every path that can start an execution, raced through the HTTP API on real PostgreSQL:
replays of an ``unknown`` auto-replayable record (duplicates and ``/replay``), a retryable
``failed_final`` record, an approved ``/start``, and a look-up settling while a late
``complete`` arrives. Each thread has its own connection; a barrier releases them together.

Exactly one caller executes (and, where a downstream is involved, exactly one effect lands
there); every other caller gets a protocol answer: a ``wait``, a recorded result or a 409
problem with a stable code, never a 500 or an ``INVALID_TRANSITION`` from a lost race.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest
from django.db import connections, transaction
from django.test import Client
from django.utils import timezone

from ledger.models import ApprovalRequest, AuditEvent, IdempotencyRecord, LedgerEntry
from ledger.records import Outcome, complete_locked, lock_record, resolve_locked
from ledger.services.approvals import decide
from reconcile.models import DownstreamAdapter
from reconcile.services import reconcile_record
from sandbox.server import SandboxServer
from tests.api.conftest import ApiClient, client_for
from tests.factories import make_approver

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

CALLERS = 16


def _race(callers: int, act: Callable[[int], Any]) -> list[Any]:
    """Run ``act(i)`` in ``callers`` threads released together; each closes its connection."""
    barrier = threading.Barrier(callers)

    def run(index: int) -> Any:
        try:
            barrier.wait(timeout=30)
            return act(index)
        finally:
            connections.close_all()

    with ThreadPoolExecutor(max_workers=callers) as pool:
        return list(pool.map(run, range(callers)))


def _thread_client(api: ApiClient) -> ApiClient:
    """A client of the same tenant and token that reports a server error as a 500 response
    instead of raising it, so a race that breaks the server shows up in the answers."""
    client = ApiClient(api.tenant, api.token)
    client.client = Client(raise_request_exception=False)
    client.inputs = api.inputs  # the calls' inputs, which a replay or a start names
    return client


def _answer(response: Any) -> str:
    """What a caller was told: the decision of a call, or the problem code of a refusal."""
    assert response.status_code != 500, response.content
    body = response.json()
    return str(body.get("decision") or body.get("code"))


def _effect(sandbox: SandboxServer, key: str) -> None:
    """The downstream side effect of one execution. No idempotency key is sent, so the
    downstream counts every execution: only the ledger stands between a race and a duplicate."""
    response = httpx.post(f"{sandbox.url}/orders/objects", json={"reference": key}, timeout=10)
    assert response.status_code == 201, response.text


def _effects(sandbox: SandboxServer, key: str) -> int:
    stats = httpx.get(f"{sandbox.url}/orders/stats", timeout=10).json()
    return int(stats["per_reference"].get(key, 0))


def _uncertain_read(api: ApiClient) -> dict[str, Any]:
    api.start_run()
    first = api.call("read_file", {"path": "a.txt"}).json()
    done = api.post(
        f"/calls/{first['call_id']}/complete", {"fencing_token": 1, "outcome": "uncertain"}
    )
    assert done.json()["record_state"] == "unknown"
    return first


def _failed_retryable_read(api: ApiClient) -> dict[str, Any]:
    api.start_run()
    first = api.call("read_file", {"path": "a.txt"}).json()
    done = api.post(
        f"/calls/{first['call_id']}/complete",
        {
            "fencing_token": 1,
            "outcome": "failed",
            "retryable": True,
            "error": {"code": "UPSTREAM_BUSY", "message": "try again"},
        },
    )
    assert done.json()["record_state"] == "failed_final"
    return first


def _duplicates_race(api: ApiClient, sandbox: SandboxServer, key: str) -> Counter[str]:
    """Every caller re-sends the same call; an executor performs the effect."""

    def act(_index: int) -> str:
        response = _thread_client(api).call("read_file", {"path": "a.txt"})
        answer = _answer(response)
        if answer == "execute":
            _effect(sandbox, key)
        return answer

    return Counter(_race(CALLERS, act))


def _replays_race(api: ApiClient, sandbox: SandboxServer, call_id: str, key: str) -> Counter[str]:
    """Every caller asks to recover the same call; an executor performs the effect."""

    def act(_index: int) -> str:
        response = _thread_client(api).post(f"/calls/{call_id}/replay", {})
        answer = _answer(response)
        if answer == "execute":
            _effect(sandbox, key)
        return answer

    return Counter(_race(CALLERS, act))


def _assert_one_execution(
    answers: Counter[str], record: IdempotencyRecord, sandbox: SandboxServer
) -> None:
    assert answers == {"execute": 1, "wait": CALLERS - 1}
    assert record.state == "executing" and record.executions == 2
    assert record.fencing_token == 2
    assert _effects(sandbox, record.key) == 1


def test_duplicates_of_an_unknown_auto_replayable_call_replay_it_once(
    tenant, sandbox: SandboxServer
) -> None:
    api = client_for(tenant)
    first = _uncertain_read(api)
    answers = _duplicates_race(api, sandbox, first["idempotency_key"])
    _assert_one_execution(answers, IdempotencyRecord.objects.get(), sandbox)
    replayed = AuditEvent.objects.filter(action="record.replayed").count()
    assert replayed == 1


def test_replay_requests_of_an_unknown_auto_replayable_call_start_it_once(
    tenant, sandbox: SandboxServer
) -> None:
    api = client_for(tenant)
    first = _uncertain_read(api)
    answers = _replays_race(api, sandbox, first["call_id"], first["idempotency_key"])
    _assert_one_execution(answers, IdempotencyRecord.objects.get(), sandbox)


def test_duplicates_of_a_retryable_failed_call_retry_it_once(
    tenant, sandbox: SandboxServer
) -> None:
    api = client_for(tenant)
    first = _failed_retryable_read(api)
    answers = _duplicates_race(api, sandbox, first["idempotency_key"])
    record = IdempotencyRecord.objects.get()
    _assert_one_execution(answers, record, sandbox)
    assert record.failed_executions == 1


def test_replay_requests_of_a_retryable_failed_call_start_it_once(
    tenant, sandbox: SandboxServer
) -> None:
    api = client_for(tenant)
    first = _failed_retryable_read(api)
    answers = _replays_race(api, sandbox, first["call_id"], first["idempotency_key"])
    _assert_one_execution(answers, IdempotencyRecord.objects.get(), sandbox)


def _approved_replay_of_a_failed_order(api: ApiClient, sandbox: SandboxServer) -> dict[str, Any]:
    """create_order looked up and not found downstream (failed_final, safe to retry), its
    replay asked for and approved by a human: the call waits for ``/start``."""
    api.start_run()
    first = api.call("create_order", {"cart": "c-1"}, business_object_id="cart-1").json()
    api.post(f"/calls/{first['call_id']}/complete", {"fencing_token": 1, "outcome": "uncertain"})
    record = IdempotencyRecord.objects.get()
    DownstreamAdapter.objects.create(
        tenant=api.tenant,
        tool=record.tool,
        url_template=f"{sandbox.url}/orders/objects/by-key/{{key}}",
        found_statuses=[200],
        not_found_statuses=[404],
        grace_seconds=0,
    )
    assert reconcile_record(record.pk, worker="w") == "failed_final"
    replay = api.post(f"/calls/{first['call_id']}/replay", {}).json()
    assert replay["decision"] == "approval_required", replay
    approver = make_approver(api.tenant, "approver")
    decide(approval=ApprovalRequest.objects.get(), user=approver, approve=True, reason="retry")
    return replay


@pytest.mark.usefixtures("private_downstreams")
def test_an_approved_start_raced_starts_once_and_uses_the_approval_once(
    tenant, sandbox: SandboxServer
) -> None:
    api = client_for(tenant)
    replay = _approved_replay_of_a_failed_order(api, sandbox)
    key = replay["idempotency_key"]

    def act(_index: int) -> str:
        response = _thread_client(api).post(f"/calls/{replay['call_id']}/start")
        answer = _answer(response)
        if answer == "execute":
            _effect(sandbox, key)
        return answer

    answers = Counter(_race(CALLERS, act))
    assert answers == {"execute": 1, "APPROVAL_INVALID": CALLERS - 1}
    record = IdempotencyRecord.objects.get()
    assert (record.state, record.executions, record.fencing_token) == ("executing", 2, 2)
    assert ApprovalRequest.objects.get().state == "consumed"
    assert AuditEvent.objects.filter(action="approval.consumed").count() == 1
    assert _effects(sandbox, key) == 1


@pytest.mark.usefixtures("private_downstreams")
def test_an_approved_start_raced_with_duplicates_starts_once(
    tenant, sandbox: SandboxServer
) -> None:
    """Half the callers start the approved call, half re-send the original: only the start
    may execute, and the duplicates are told to wait or to use the outcome."""
    api = client_for(tenant)
    replay = _approved_replay_of_a_failed_order(api, sandbox)

    def act(index: int) -> str:
        client = _thread_client(api)
        if index % 2:
            return _answer(client.post(f"/calls/{replay['call_id']}/start"))
        return _answer(client.call("create_order", {"cart": "c-1"}, business_object_id="cart-1"))

    answers = Counter(_race(CALLERS, act))
    assert answers["execute"] == 1
    assert set(answers) <= {"execute", "APPROVAL_INVALID", "wait", "recorded_result"}
    assert IdempotencyRecord.objects.get().executions == 2


def _unknown_order_found_downstream(
    api: ApiClient, sandbox: SandboxServer, round_no: int
) -> tuple[dict[str, Any], IdempotencyRecord]:
    """A create_order call reported uncertain whose order does exist downstream."""
    first = api.call(
        "create_order", {"cart": round_no}, business_object_id=f"cart-{round_no}"
    ).json()
    api.post(f"/calls/{first['call_id']}/complete", {"fencing_token": 1, "outcome": "uncertain"})
    record = IdempotencyRecord.objects.get(key=first["idempotency_key"])
    DownstreamAdapter.objects.get_or_create(
        tenant=api.tenant,
        tool=record.tool,
        defaults={
            "url_template": f"{sandbox.url}/orders/objects/by-key/{{key}}",
            "found_statuses": [200],
            "not_found_statuses": [404],
            "grace_seconds": 0,
        },
    )
    httpx.post(
        f"{sandbox.url}/orders/objects",
        json={"reference": record.key},
        headers={"Idempotency-Key": record.key},
        timeout=10,
    )
    return first, record


def _late_report(reported: str) -> dict[str, Any]:
    if reported == "succeeded":
        return {"fencing_token": 1, "outcome": "succeeded", "result": {"order": "o-1"}}
    return {
        "fencing_token": 1,
        "outcome": "failed",
        "error": {"code": "DOWNSTREAM_ERROR", "message": "gave up"},
    }


def _settled_once(record: IdempotencyRecord) -> IdempotencyRecord:
    settling = AuditEvent.objects.filter(
        target_id=str(record.pk),
        action__in=(
            "record.succeeded",
            "record.failed_final",
            "record.resolved_succeeded",
            "record.resolved_failed_final",
        ),
    )
    assert settling.count() == 1, list(settling.values_list("action", flat=True))
    settled = IdempotencyRecord.objects.get(pk=record.pk)
    assert settled.executions == 1
    return settled


@pytest.mark.usefixtures("private_downstreams")
def test_a_look_up_settling_races_a_late_failure_report(tenant, sandbox: SandboxServer) -> None:
    """The executor's late ``failed`` and a worker's look-up (the order exists downstream)
    reach the unknown record together, over several rounds: whichever settles it first wins,
    the other is answered from the settled record (or refused with a protocol code), and the
    record is settled once."""
    api = client_for(tenant)
    api.start_run()
    for round_no in range(4):
        first, record = _unknown_order_found_downstream(api, sandbox, round_no)

        def act(index: int, call_id: str = first["call_id"], pk: int = record.pk) -> str:
            if index == 0:
                return reconcile_record(pk, worker="w")
            client = _thread_client(api)
            return _answer(client.post(f"/calls/{call_id}/complete", _late_report("failed")))

        look_up, complete = _race(2, act)
        settled = _settled_once(record)
        if look_up == "succeeded":
            assert (settled.state, complete) == ("succeeded", "RECORD_SETTLED")
        else:
            assert look_up in ("already-settled", "skipped")
            assert (settled.state, complete) == ("failed_final", "execute")


def _waiting_for_a_lock() -> bool:
    with connections["default"].cursor() as cursor:
        # Inside a transaction the activity view is a snapshot taken at its first read.
        cursor.execute("SELECT pg_stat_clear_snapshot()")
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity "
            "WHERE datname = current_database() AND wait_event_type = 'Lock'"
        )
        return bool(cursor.fetchone()[0])


def _while_holding_the_lock(
    pk: int, then: Callable[[IdempotencyRecord], None], waiter: Callable[[], Any]
) -> Any:
    """Lock the record, start ``waiter`` in another thread, and once it waits for the lock,
    run ``then`` on the locked record and commit: the interleaving in which the waiter's
    statement began before the holder's change."""
    locked_event = threading.Event()
    outcome: dict[str, Any] = {}

    def wait_for_it() -> None:
        try:
            locked_event.wait(timeout=30)
            outcome["answer"] = waiter()
        finally:
            connections.close_all()

    thread = threading.Thread(target=wait_for_it)
    thread.start()
    with transaction.atomic():
        locked, _now = lock_record(pk)
        locked_event.set()
        for _ in range(300):
            if _waiting_for_a_lock():
                break
            time.sleep(0.01)
        else:
            pytest.fail("the waiter never waited for the record's lock")
        then(locked)
    thread.join(timeout=30)
    return outcome["answer"]


def _look_up_settles(locked: IdempotencyRecord) -> None:
    """What a look-up that found the order applies to the record it locked."""
    resolve_locked(
        locked,
        outcome=Outcome.SUCCEEDED,
        actor="worker:w",
        source=AuditEvent.Source.WORKER,
        detail="found downstream",
        result={"evidence": {"order": "o-1"}, "reconciled": "found"},
        now=timezone.now(),
    )


def test_a_late_success_report_behind_a_settling_look_up_is_told_it_was_settled(
    tenant, sandbox: SandboxServer
) -> None:
    api = client_for(tenant)
    api.start_run()
    first, record = _unknown_order_found_downstream(api, sandbox, 0)
    client = _thread_client(api)
    response = _while_holding_the_lock(
        record.pk,
        _look_up_settles,
        lambda: client.post(f"/calls/{first['call_id']}/complete", _late_report("succeeded")),
    )
    assert response.status_code == 409 and _answer(response) == "RECORD_SETTLED"
    assert _settled_once(record).state == "succeeded"


def test_a_late_failure_report_behind_a_settling_look_up_is_refused(
    tenant, sandbox: SandboxServer
) -> None:
    api = client_for(tenant)
    api.start_run()
    first, record = _unknown_order_found_downstream(api, sandbox, 0)
    client = _thread_client(api)
    response = _while_holding_the_lock(
        record.pk,
        _look_up_settles,
        lambda: client.post(f"/calls/{first['call_id']}/complete", _late_report("failed")),
    )
    assert response.status_code == 409 and _answer(response) == "RECORD_SETTLED"
    assert _settled_once(record).state == "succeeded"


@pytest.mark.parametrize("reported", ["succeeded", "failed"])
def test_a_look_up_behind_a_late_report_leaves_the_settled_record_alone(
    tenant, sandbox: SandboxServer, reported: str
) -> None:
    api = client_for(tenant)
    api.start_run()
    first, record = _unknown_order_found_downstream(api, sandbox, 0)
    entry = LedgerEntry.objects.get(call_id=first["call_id"])
    report = _late_report(reported)

    def report_under_the_lock(locked: IdempotencyRecord) -> None:
        complete_locked(
            locked,
            fencing_token=1,
            outcome=Outcome(reported),
            actor="runtime",
            result=report.get("result"),
            error=report.get("error"),
            entry=entry,
            now=timezone.now(),
        )

    look_up = _while_holding_the_lock(
        record.pk, report_under_the_lock, lambda: reconcile_record(record.pk, worker="w")
    )
    assert look_up in ("already-settled", "skipped")
    settled = _settled_once(record)
    assert settled.state == ("succeeded" if reported == "succeeded" else "failed_final")
