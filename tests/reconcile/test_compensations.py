"""Compensations against the sandbox's real HTTP orders service: decided on the console by an
approver, run by the worker task (eagerly, in this process), looked up when their answer is
lost, sent again by the sweep when their message is lost, and never sent twice
(docs/compensation.md)."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from django.db.models.functions import Now

from console.celery import app as celery_app
from ledger.domain import Idempotency, RecordState
from ledger.models import (
    ApprovalRequest,
    AuditEvent,
    Compensation,
    IdempotencyRecord,
    Run,
    Tenant,
    Tool,
)
from ledger.services.compensations import compensation_record, compensation_view
from ledger.services.registry import override_tool
from reconcile.compensations import declare_compensation, unsent_sagas
from reconcile.models import CompensationAdapter, DownstreamAdapter, ReconcileAttempt
from reconcile.services import reconcile_record
from reconcile.tasks import compensate_run, run_compensations, sweep_compensations
from sandbox.server import SandboxServer
from tests.api.conftest import ApiClient, client_for
from tests.console.conftest import make_user, signed_in
from tests.factories import make_tool
from tests.processes import RedisServer, Worker, celery_worker
from tests.sandbox_fixtures import arm

pytestmark = pytest.mark.django_db


def _declare_cancel(tenant: Tenant, sandbox: SandboxServer, *tools: Tool) -> Tool:
    """cancel_order, run by a worker through the sandbox and looked up there by key, as the
    compensation of each of ``tools``."""
    cancel = make_tool(tenant, "cancel_order")
    DownstreamAdapter.objects.create(
        tenant=tenant,
        tool=cancel,
        url_template=f"{sandbox.url}/orders/cancellations/by-key/{{key}}",
        found_statuses=[200],
        not_found_statuses=[404],
        grace_seconds=0,
    )
    CompensationAdapter.objects.create(
        tenant=tenant,
        tool=cancel,
        url_template=f"{sandbox.url}/orders/objects/{{order_id}}/cancel",
        success_statuses=[200, 201],
    )
    for tool in tools:
        declare_compensation(
            tool=tool,
            compensating_tool="cancel_order",
            arguments={"order_id": "result.id"},
            actor="test",
            source="system",
        )
    return cancel


@pytest.fixture
def api(tenant: Tenant) -> ApiClient:
    return client_for(tenant)


@pytest.fixture(autouse=True)
def _sandbox_is_allowed(settings: Any) -> None:
    settings.LEDGER_OUTBOUND_ALLOW_PRIVATE = True  # the sandbox listens on 127.0.0.1


def _stats(sandbox: SandboxServer) -> dict[str, Any]:
    return httpx.get(f"{sandbox.url}/orders/stats", timeout=5).json()


def _believed_a_read(tenant: Any) -> Any:
    """``place_order``, wrongly believed idempotent: a manager's override (a runtime's own
    declaration may not loosen it), so a lost answer is replayed at once."""
    return override_tool(
        tool=make_tool(tenant, "place_order"),
        idempotency=Idempotency.IDEMPOTENT,
        reason="believed to be a read",
        actor="mia",
        source="console",
    )


def _order_twice(api: ApiClient, sandbox: SandboxServer) -> tuple[IdempotencyRecord, dict]:
    """A runtime that believes place_order is idempotent: it sends no key downstream, its first
    answer is lost after the order was made, and the ledger lets it replay at once."""
    api.start_run()
    first = api.call("place_order", {"cart": "cart-1"}).json()
    assert first["decision"] == "execute"
    arm(sandbox, service="orders", mode="timeout_after_commit", hang_seconds=1)
    with pytest.raises(httpx.TimeoutException):
        httpx.post(f"{sandbox.url}/orders/objects", json={"reference": "cart-1"}, timeout=0.3)
    api.post(f"/calls/{first['call_id']}/complete", {"fencing_token": 1, "outcome": "uncertain"})
    replay = api.post(f"/calls/{first['call_id']}/replay", {}).json()
    assert replay["decision"] == "execute"
    second = httpx.post(f"{sandbox.url}/orders/objects", json={"reference": "cart-1"}).json()
    done = api.post(
        f"/calls/{replay['call_id']}/complete",
        {
            "fencing_token": replay["lease"]["fencing_token"],
            "outcome": "succeeded",
            "result": second,
        },
    )
    assert done.status_code == 200, done.content
    assert _stats(sandbox)["per_reference"] == {"cart-1": 2}
    return IdempotencyRecord.objects.get(key=first["idempotency_key"]), second


def test_a_duplicate_order_is_cancelled_once_though_the_answer_is_lost_and_it_is_retried(
    tenant, api, sandbox, django_user_model
):
    place = _believed_a_read(tenant)
    assert place.idempotency == "idempotent"  # the misclassification that let it run twice
    _declare_cancel(tenant, sandbox, place)
    record, duplicate = _order_twice(api, sandbox)
    olga = signed_in(make_user(django_user_model, "olga", tenant, "operator"))
    alice = signed_in(make_user(django_user_model, "alice", tenant, "approver"))

    page = alice.get(f"/compensations/records/{record.pk}/").content.decode()
    assert "cancel_order" in page and duplicate["id"] in page
    assert f"{record.key}:compensate" in page
    assert olga.post(f"/compensations/records/{record.pk}/request").status_code == 302
    compensation = Compensation.objects.get(original=record)
    assert compensation.arguments == {"order_id": duplicate["id"]}

    arm(sandbox, service="orders", operation="cancel", mode="reset_after_commit")
    decided = alice.post(
        f"/compensations/records/{record.pk}/decide",
        {"decision": "approve", "reason": "duplicate order from a retried call"},
    )
    assert decided.status_code == 302
    assert run_compensations([compensation.pk]) == ["uncertain"]  # the answer was lost
    assert compensation_record(compensation).state == RecordState.UNKNOWN

    for _ in range(3):  # asked again, and the task redelivered, while the outcome is unknown
        assert alice.post(f"/compensations/records/{record.pk}/request").status_code == 302
        assert run_compensations([compensation.pk]) == ["unknown"]
    assert reconcile_record(compensation_record(compensation).pk) == "succeeded"

    stats = _stats(sandbox)
    assert stats["cancellations_per_object"] == {duplicate["id"]: 1}
    assert stats["cancel_requests_per_key"] == {compensation.key: 1}
    assert compensation_view(record)["state"] == "compensated"
    assert compensation_view(compensation_record(compensation))["key"] == record.key
    assert "compensated" in alice.get(f"/compensations/records/{record.pk}/").content.decode()
    approved = AuditEvent.objects.get(action="approval.approved")
    assert approved.actor == "alice" and approved.created_at is not None
    assert approved.detail == "duplicate order from a retried call"
    assert AuditEvent.objects.get(action="compensation.requested").actor == "olga"


def test_the_requester_cannot_approve_their_own_compensation(
    tenant, api, sandbox, django_user_model
):
    place = _believed_a_read(tenant)
    _declare_cancel(tenant, sandbox, place)
    record, _duplicate = _order_twice(api, sandbox)
    alice = signed_in(make_user(django_user_model, "alice", tenant, "approver"))
    alice.post(f"/compensations/records/{record.pk}/request")
    refused = alice.post(
        f"/compensations/records/{record.pk}/decide", {"decision": "approve", "reason": "mine"}
    )
    assert refused.status_code == 403
    compensation = Compensation.objects.get(original=record)
    assert compensation_record(compensation).state == RecordState.RESERVED
    denial = AuditEvent.objects.get(action="approval.decide_refused")
    assert denial.actor == "alice" and "their own request" in denial.detail
    assert run_compensations([compensation.pk]) == ["not-approved"]
    assert _stats(sandbox)["cancellations"] == 0


def test_a_compensation_needs_a_reason(tenant, api, sandbox, django_user_model):
    place = _believed_a_read(tenant)
    _declare_cancel(tenant, sandbox, place)
    record, _duplicate = _order_twice(api, sandbox)
    signed_in(make_user(django_user_model, "olga", tenant, "operator")).post(
        f"/compensations/records/{record.pk}/request"
    )
    alice = signed_in(make_user(django_user_model, "alice", tenant, "approver"))
    alice.post(f"/compensations/records/{record.pk}/decide", {"decision": "approve"})
    compensation = Compensation.objects.get(original=record)
    assert not AuditEvent.objects.filter(action="approval.approved").exists()
    assert run_compensations([compensation.pk]) == ["not-approved"]


def test_an_operator_cannot_decide_a_compensation(tenant, api, sandbox, django_user_model):
    place = _believed_a_read(tenant)
    _declare_cancel(tenant, sandbox, place)
    record, _duplicate = _order_twice(api, sandbox)
    olga = signed_in(make_user(django_user_model, "olga", tenant, "operator"))
    olga.post(f"/compensations/records/{record.pk}/request")
    answer = olga.post(
        f"/compensations/records/{record.pk}/decide", {"decision": "approve", "reason": "x"}
    )
    assert answer.status_code == 403
    assert not AuditEvent.objects.filter(action="approval.approved").exists()


def _three_orders(
    api: ApiClient, sandbox: SandboxServer, run_id: str = "run-3", count: int = 3
) -> tuple[Run, list[dict]]:
    """A run that placed three orders (or ``count``), each with its key passed downstream."""
    api.start_run(run_id)
    orders = []
    for n in range(count):
        call = api.call(
            "create_order", {"cart": f"cart-{n}"}, run_id=run_id, step_id=f"step-{n}"
        ).json()
        order = httpx.post(
            f"{sandbox.url}/orders/objects",
            json={"reference": f"cart-{n}"},
            headers={"Idempotency-Key": call["idempotency_key"]},
        ).json()
        api.post(
            f"/calls/{call['call_id']}/complete",
            {"fencing_token": 1, "outcome": "succeeded", "result": order},
        )
        orders.append(order)
    return Run.objects.get(run_id=run_id), orders


def _cancelled_at(sandbox: SandboxServer, key: str) -> float:
    found = httpx.get(f"{sandbox.url}/orders/cancellations/by-key/{key}", timeout=5)
    assert found.status_code == 200, found.text
    return float(found.json()["created_at"])


def test_a_run_compensated_as_a_whole_undoes_its_orders_newest_first_once_each(
    tenant, api, sandbox, django_user_model, create_order
):
    _declare_cancel(tenant, sandbox, create_order)
    run, orders = _three_orders(api, sandbox)
    olga = signed_in(make_user(django_user_model, "olga", tenant, "operator"))
    alice = signed_in(make_user(django_user_model, "alice", tenant, "approver"))
    page = alice.get(f"/compensations/runs/{run.pk}/").content.decode()
    positions = [page.index(order["id"]) for order in orders]
    assert positions == sorted(positions, reverse=True)  # previewed newest first
    olga.post(f"/compensations/runs/{run.pk}/request")
    alice.post(
        f"/compensations/runs/{run.pk}/decide", {"decision": "approve", "reason": "wrong cart"}
    )
    report = compensate_run(run.pk)
    assert report["stopped_at"] is None and len(report["done"]) == 3
    assert compensate_run(run.pk)["done"] == report["done"]  # again: nothing more is sent

    stats = _stats(sandbox)
    assert stats["cancellations_per_object"] == {order["id"]: 1 for order in orders}
    assert set(stats["cancel_requests_per_key"].values()) == {1}
    keys = [Compensation.objects.get(arguments={"order_id": o["id"]}).key for o in orders]
    times = [_cancelled_at(sandbox, key) for key in keys]
    assert times == sorted(times, reverse=True)  # the newest order was cancelled first
    assert AuditEvent.objects.filter(action="approval.approved", actor="alice").count() == 3


def test_no_one_who_asked_for_a_runs_saga_approves_it(
    tenant, api, sandbox, django_user_model, create_order
):
    """Alice asks for the run's saga, Bob asks again while it waits: neither may approve any of
    its compensations (each refusal audited, nothing decided, nothing sent); Carol can."""
    _declare_cancel(tenant, sandbox, create_order)
    run, orders = _three_orders(api, sandbox)
    askers = [make_user(django_user_model, name, tenant, "approver") for name in ("alice", "bob")]
    for asker in askers:
        assert signed_in(asker).post(f"/compensations/runs/{run.pk}/request").status_code == 302
    for asker in askers:
        refused = signed_in(asker).post(
            f"/compensations/runs/{run.pk}/decide", {"decision": "approve", "reason": "mine"}
        )
        assert refused.status_code == 403
        assert AuditEvent.objects.filter(
            action="approval.decide_refused", actor=asker.username
        ).exists()
    assert not AuditEvent.objects.filter(action="approval.approved").exists()
    assert compensate_run(run.pk)["done"] == []
    carol = signed_in(make_user(django_user_model, "carol", tenant, "approver"))
    carol.post(f"/compensations/runs/{run.pk}/decide", {"decision": "approve", "reason": "ok"})
    assert len(compensate_run(run.pk)["done"]) == len(orders)
    assert set(_stats(sandbox)["cancel_requests_per_key"].values()) == {1}


def test_a_saga_stops_at_the_first_failure_and_lists_the_rest(
    tenant, api, sandbox, django_user_model, create_order
):
    _declare_cancel(tenant, sandbox, create_order)
    run, orders = _three_orders(api, sandbox)
    signed_in(make_user(django_user_model, "olga", tenant, "operator")).post(
        f"/compensations/runs/{run.pk}/request"
    )
    signed_in(make_user(django_user_model, "alice", tenant, "approver")).post(
        f"/compensations/runs/{run.pk}/decide", {"decision": "approve", "reason": "wrong cart"}
    )
    newest = Compensation.objects.get(arguments={"order_id": orders[2]["id"]})
    arm(sandbox, service="orders", operation="cancel", mode="error_5xx")
    report = compensate_run(run.pk)
    assert report["stopped_at"] == newest.key and report["state"] == RecordState.UNKNOWN
    assert len(report["not_run"]) == 2 and report["done"] == []
    assert _stats(sandbox)["cancellations"] == 0
    stopped = AuditEvent.objects.get(action="compensation.saga_stopped")
    assert stopped.after["not_run"] == report["not_run"]


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_real_worker_runs_the_approved_compensation_once(
    tenant, api, sandbox, django_user_model, broker: RedisServer, tmp_path: Path
):
    place = _believed_a_read(tenant)
    _declare_cancel(tenant, sandbox, place)
    record, duplicate = _order_twice(api, sandbox)
    olga = signed_in(make_user(django_user_model, "olga", tenant, "operator"))
    alice = signed_in(make_user(django_user_model, "alice", tenant, "approver"))
    olga.post(f"/compensations/records/{record.pk}/request")
    compensation = Compensation.objects.get(original=record)
    arm(sandbox, service="orders", operation="cancel", mode="reset_after_commit")
    allow = {"LEDGER_OUTBOUND_ALLOW_PRIVATE": "true"}
    with celery_worker("compensations", broker.url, tmp_path, env=allow) as worker:
        alice.post(
            f"/compensations/records/{record.pk}/decide",
            {"decision": "approve", "reason": "duplicate order"},
        )  # committed: the approval reaches the worker, which sends it and then looks it up

        def settled() -> bool:
            return compensation_record(compensation).state == RecordState.SUCCEEDED

        _wait(settled, worker)
        for _ in range(3):
            alice.post(f"/compensations/records/{record.pk}/request")
            run_compensations.delay([compensation.pk])
        time.sleep(3)  # let the worker take the three messages
    stats = _stats(sandbox)
    assert stats["cancellations_per_object"] == {duplicate["id"]: 1}
    assert stats["cancel_requests_per_key"] == {compensation.key: 1}
    assert compensation_record(compensation).executions == 1
    assert compensation_view(record)["state"] == "compensated"
    # The answer was lost: the worker's look-up by key is what found the cancellation.
    found = ReconcileAttempt.objects.get(record=compensation_record(compensation))
    assert found.outcome == "found" and found.evidence["object_id"] == duplicate["id"]


def _wait(condition: Callable[[], bool], worker: Worker, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out; worker log:\n{worker.log.read_text()[-3000:]}")
        time.sleep(0.25)


def test_a_stopped_saga_goes_on_where_it_stopped_once_the_look_up_settled_it(
    tenant, api, sandbox, django_user_model, create_order
):
    _declare_cancel(tenant, sandbox, create_order)
    run, orders = _three_orders(api, sandbox)
    olga = signed_in(make_user(django_user_model, "olga", tenant, "operator"))
    olga.post(f"/compensations/runs/{run.pk}/request")
    signed_in(make_user(django_user_model, "alice", tenant, "approver")).post(
        f"/compensations/runs/{run.pk}/decide", {"decision": "approve", "reason": "wrong cart"}
    )
    arm(sandbox, service="orders", operation="cancel", mode="reset_after_commit")
    stopped = compensate_run(run.pk)
    assert stopped["state"] == RecordState.UNKNOWN and len(stopped["not_run"]) == 2
    newest = Compensation.objects.get(key=stopped["stopped_at"])
    assert reconcile_record(compensation_record(newest).pk) == "succeeded"
    assert "Go on" in olga.get(f"/compensations/runs/{run.pk}/").content.decode()
    olga.post(f"/compensations/runs/{run.pk}/request")  # go on: nothing new is requested
    assert Compensation.objects.count() == 3
    finished = compensate_run(run.pk)
    assert finished["stopped_at"] is None
    assert finished["done"] == [stopped["stopped_at"], *stopped["not_run"]]
    stats = _stats(sandbox)
    assert stats["cancellations_per_object"] == {order["id"]: 1 for order in orders}
    assert set(stats["cancel_requests_per_key"].values()) == {1}


def test_the_approvals_inbox_decides_a_compensation_with_a_reason(
    tenant, api, sandbox, django_user_model
):
    place = _believed_a_read(tenant)
    _declare_cancel(tenant, sandbox, place)
    record, duplicate = _order_twice(api, sandbox)
    signed_in(make_user(django_user_model, "olga", tenant, "operator")).post(
        f"/compensations/records/{record.pk}/request"
    )
    compensation = Compensation.objects.get(original=record)
    approval = ApprovalRequest.objects.get(record=compensation_record(compensation))
    alice = signed_in(make_user(django_user_model, "alice", tenant, "approver"))
    assert "cancel_order" in alice.get("/approvals/").content.decode()
    alice.post(f"/approvals/{approval.pk}/decide", {"decision": "approve"})  # no reason
    assert run_compensations([compensation.pk]) == ["not-approved"]
    alice.post(f"/approvals/{approval.pk}/decide", {"decision": "approve", "reason": "dup"})
    assert run_compensations([compensation.pk]) == ["succeeded"]
    assert _stats(sandbox)["cancellations_per_object"] == {duplicate["id"]: 1}


# --- the sweep: approved compensations whose message was lost --------------------------------


def _sweep() -> int:
    """One compensation sweep, whose messages run at once, in this process: a worker takes
    each as soon as it is sent."""
    eager = celery_app.conf.task_always_eager
    celery_app.conf.task_always_eager = True
    try:
        return sweep_compensations()
    finally:
        celery_app.conf.task_always_eager = eager


def _approved_long_ago(settings: Any) -> None:
    """Every granted approval was granted longer ago than the sweep's grace period."""
    ApprovalRequest.objects.filter(state="approved").update(
        decided_at=Now() - timedelta(seconds=settings.LEDGER_COMPENSATION_RESEND_SECONDS + 1)
    )


def _approved_with_the_broker_down(
    broker: RedisServer, django_capture_on_commit_callbacks: Any, decide: Callable[[], object]
) -> None:
    """``decide`` approves, and its commit puts the work on a broker that is down."""
    broker.stop()
    with django_capture_on_commit_callbacks(execute=True) as sends:
        decide()
    assert sends  # the send was tried, and failed fast


def test_a_compensation_approved_while_the_broker_is_down_is_sent_by_the_sweep_once(
    tenant,
    api,
    sandbox,
    django_user_model,
    settings,
    broker: RedisServer,
    django_capture_on_commit_callbacks,
    caplog,
):
    place = _believed_a_read(tenant)
    _declare_cancel(tenant, sandbox, place)
    record, duplicate = _order_twice(api, sandbox)
    signed_in(make_user(django_user_model, "olga", tenant, "operator")).post(
        f"/compensations/records/{record.pk}/request"
    )
    alice = signed_in(make_user(django_user_model, "alice", tenant, "approver"))
    compensation = Compensation.objects.get(original=record)
    with caplog.at_level(logging.WARNING, logger="reconcile.tasks"):
        _approved_with_the_broker_down(
            broker,
            django_capture_on_commit_callbacks,
            lambda: alice.post(
                f"/compensations/records/{record.pk}/decide",
                {"decision": "approve", "reason": "duplicate order"},
            ),
        )
    assert "broker unavailable; compensations wait" in caplog.messages
    assert compensation_record(compensation).state == RecordState.RESERVED
    _approved_long_ago(settings)
    assert _sweep() == 1
    assert _sweep() == 0  # sent once: its approval is used up
    assert compensation_record(compensation).state == RecordState.SUCCEEDED
    stats = _stats(sandbox)
    assert stats["cancellations_per_object"] == {duplicate["id"]: 1}
    assert stats["cancel_requests_per_key"] == {compensation.key: 1}


def test_the_sweep_leaves_a_compensation_approved_within_the_grace_period(
    tenant, api, sandbox, django_user_model
):
    """Its message may still be on its way (the commit's send): the sweep does not race it."""
    place = _believed_a_read(tenant)
    _declare_cancel(tenant, sandbox, place)
    record, _duplicate = _order_twice(api, sandbox)
    signed_in(make_user(django_user_model, "olga", tenant, "operator")).post(
        f"/compensations/records/{record.pk}/request"
    )
    signed_in(make_user(django_user_model, "alice", tenant, "approver")).post(
        f"/compensations/records/{record.pk}/decide",
        {"decision": "approve", "reason": "duplicate order"},
    )
    assert _sweep() == 0
    compensation = Compensation.objects.get(original=record)
    assert compensation_record(compensation).state == RecordState.RESERVED
    assert _stats(sandbox)["cancellations"] == 0


def _stopped_by_a_lost_answer(sandbox: SandboxServer, settings: Any) -> None:
    arm(sandbox, service="orders", operation="cancel", mode="error_5xx")


def _stopped_by_a_refused_request(sandbox: SandboxServer, settings: Any) -> None:
    settings.LEDGER_OUTBOUND_ALLOW_PRIVATE = False  # not sent: failed, retryable


@pytest.mark.parametrize(
    ("stop", "state"),
    [
        (_stopped_by_a_lost_answer, RecordState.UNKNOWN),
        (_stopped_by_a_refused_request, RecordState.FAILED_FINAL),
    ],
)
def test_the_sweep_does_not_send_a_stopped_saga_again(
    tenant, api, sandbox, django_user_model, create_order, settings, stop, state
):
    """The steps after the one it stopped at wait, approved, for a human to go on."""
    _declare_cancel(tenant, sandbox, create_order)
    run, _orders = _three_orders(api, sandbox)
    signed_in(make_user(django_user_model, "olga", tenant, "operator")).post(
        f"/compensations/runs/{run.pk}/request"
    )
    signed_in(make_user(django_user_model, "alice", tenant, "approver")).post(
        f"/compensations/runs/{run.pk}/decide", {"decision": "approve", "reason": "wrong cart"}
    )
    stop(sandbox, settings)
    stopped = compensate_run(run.pk)
    assert stopped["state"] == state and len(stopped["not_run"]) == 2
    settings.LEDGER_OUTBOUND_ALLOW_PRIVATE = True  # the next cancel would be sent and succeed
    _approved_long_ago(settings)
    requests = _stats(sandbox)["cancel_requests_per_key"]
    assert _sweep() == 0
    assert _stats(sandbox)["cancel_requests_per_key"] == requests
    assert AuditEvent.objects.filter(action="compensation.saga_stopped").count() == 1
    waiting = Compensation.objects.filter(key__in=stopped["not_run"])
    assert {compensation_record(c).state for c in waiting} == {RecordState.RESERVED}


def test_a_saga_whose_message_was_lost_is_resumed_by_the_sweep_newest_first(
    tenant,
    api,
    sandbox,
    django_user_model,
    create_order,
    settings,
    broker: RedisServer,
    django_capture_on_commit_callbacks,
):
    _declare_cancel(tenant, sandbox, create_order)
    run, orders = _three_orders(api, sandbox)
    signed_in(make_user(django_user_model, "olga", tenant, "operator")).post(
        f"/compensations/runs/{run.pk}/request"
    )
    alice = signed_in(make_user(django_user_model, "alice", tenant, "approver"))
    _approved_with_the_broker_down(
        broker,
        django_capture_on_commit_callbacks,
        lambda: alice.post(
            f"/compensations/runs/{run.pk}/decide",
            {"decision": "approve", "reason": "wrong cart"},
        ),
    )
    assert _stats(sandbox)["cancellations"] == 0
    _approved_long_ago(settings)
    assert _sweep() == 1
    assert _sweep() == 0
    stats = _stats(sandbox)
    assert stats["cancellations_per_object"] == {order["id"]: 1 for order in orders}
    assert set(stats["cancel_requests_per_key"].values()) == {1}
    keys = [Compensation.objects.get(arguments={"order_id": o["id"]}).key for o in orders]
    times = [_cancelled_at(sandbox, key) for key in keys]
    assert times == sorted(times, reverse=True)  # the newest order was cancelled first
    assert AuditEvent.objects.filter(action="compensation.saga_done").count() == 1


def test_a_saga_that_went_on_while_the_broker_was_down_is_resumed_where_it_stopped(
    tenant, api, sandbox, django_user_model, create_order, settings
):
    _declare_cancel(tenant, sandbox, create_order)
    run, orders = _three_orders(api, sandbox)
    olga = signed_in(make_user(django_user_model, "olga", tenant, "operator"))
    olga.post(f"/compensations/runs/{run.pk}/request")
    signed_in(make_user(django_user_model, "alice", tenant, "approver")).post(
        f"/compensations/runs/{run.pk}/decide", {"decision": "approve", "reason": "wrong cart"}
    )
    arm(sandbox, service="orders", operation="cancel", mode="reset_after_commit")
    stopped = compensate_run(run.pk)
    newest = Compensation.objects.get(key=stopped["stopped_at"])
    assert reconcile_record(compensation_record(newest).pk) == "succeeded"
    _approved_long_ago(settings)
    assert _sweep() == 1  # the "Go on" whose message was lost
    stats = _stats(sandbox)
    assert stats["cancellations_per_object"] == {order["id"]: 1 for order in orders}
    assert set(stats["cancel_requests_per_key"].values()) == {1}


def test_held_sagas_do_not_keep_the_sweep_from_a_lost_compensation(
    tenant, api, sandbox, django_user_model, create_order, settings, django_assert_num_queries
):
    """The sweep's batch counts only what it sends: approved steps waiting behind a stopped
    saga never fill it."""
    settings.LEDGER_COMPENSATION_SWEEP_BATCH = 1
    _declare_cancel(tenant, sandbox, create_order)
    run, _orders = _three_orders(api, sandbox)
    olga = signed_in(make_user(django_user_model, "olga", tenant, "operator"))
    alice = signed_in(make_user(django_user_model, "alice", tenant, "approver"))
    olga.post(f"/compensations/runs/{run.pk}/request")
    alice.post(
        f"/compensations/runs/{run.pk}/decide", {"decision": "approve", "reason": "wrong cart"}
    )
    arm(sandbox, service="orders", operation="cancel", mode="error_5xx")
    assert compensate_run(run.pk)["state"] == RecordState.UNKNOWN  # two steps held after it
    other, [order] = _three_orders(api, sandbox, run_id="run-4", count=1)
    olga.post(f"/compensations/runs/{other.pk}/request")
    alice.post(
        f"/compensations/runs/{other.pk}/decide", {"decision": "approve", "reason": "wrong cart"}
    )  # its message is lost
    _approved_long_ago(settings)
    with django_assert_num_queries(1):  # one statement, however many compensations wait
        assert unsent_sagas(grace_seconds=60, limit=1) == [other.pk]
    assert _sweep() == 1
    assert _stats(sandbox)["cancellations_per_object"] == {order["id"]: 1}
