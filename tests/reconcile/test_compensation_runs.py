"""How a worker runs one compensation: what each downstream answer becomes, a refused or
unsent request asked for again, two workers at once, and TTL cleanup of a compensated action."""

from __future__ import annotations

import re
import socket
import threading
from datetime import timedelta
from typing import Any

import httpx
import pytest
from django.db import connection
from django.utils import timezone

from ledger import combinations
from ledger.calls.values import entry_classification
from ledger.classification.arguments import DecidingArgument
from ledger.classification.calls import classify_tool_call, stored_classification
from ledger.domain import DataClassification, PerCall, RecordState
from ledger.errors import InvalidInput
from ledger.models import (
    ApprovalRequest,
    AuditEvent,
    Compensation,
    IdempotencyRecord,
    Run,
    Tenant,
    Tool,
)
from ledger.redaction import redact_for_storage
from ledger.services.cleanup import cleanup_expired_records
from ledger.services.compensations import compensation_record
from reconcile.compensation_requests import decide_compensation, request_compensation
from reconcile.compensation_runs import run_compensation
from reconcile.compensations import declare_compensation
from reconcile.models import CompensationAdapter, DownstreamAdapter
from reconcile.services import reconcile_record
from sandbox.server import SandboxServer
from tests.api.conftest import client_for
from tests.console.conftest import make_user
from tests.factories import make_tool
from tests.sandbox_fixtures import arm

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _sandbox_is_allowed(settings: Any) -> None:
    settings.LEDGER_OUTBOUND_ALLOW_PRIVATE = True  # the sandbox listens on 127.0.0.1


def _approved(
    tenant: Tenant,
    sandbox: SandboxServer,
    django_user_model: Any,
    *,
    order_id: str | None = None,
    approve: bool = True,
) -> Compensation:
    """An order that happened downstream, its compensation requested by an operator and
    (unless not ``approve``) approved by an approver."""
    orders = make_tool(tenant, "create_order")
    cancel = make_tool(tenant, "cancel_order")
    CompensationAdapter.objects.create(
        tenant=tenant,
        tool=cancel,
        url_template=f"{sandbox.url}/orders/objects/{{order_id}}/cancel",
        success_statuses=[200, 201],
    )
    declare_compensation(
        tool=orders,
        compensating_tool="cancel_order",
        arguments={"order_id": "result.id"},
        actor="test",
        source="system",
    )
    api = client_for(tenant)
    api.start_run()
    call = api.call("create_order", {"cart": "c-1"}).json()
    order = httpx.post(
        f"{sandbox.url}/orders/objects",
        json={"reference": "c-1"},
        headers={"Idempotency-Key": call["idempotency_key"]},
    ).json()
    api.post(
        f"/calls/{call['call_id']}/complete",
        {"fencing_token": 1, "outcome": "succeeded", "result": {"id": order_id or order["id"]}},
    )
    operator = make_user(django_user_model, "olga", tenant, "operator")
    record = IdempotencyRecord.objects.get(key=call["idempotency_key"])
    compensation = request_compensation(
        record=record, actor="olga", requester_id=operator.pk, source="console"
    )
    if approve:
        approver = make_user(django_user_model, "alice", tenant, "approver")
        decide_compensation(
            compensation=compensation, user=approver, approve=True, reason="undo it"
        )
    return compensation


def _cancellations(sandbox: SandboxServer) -> int:
    return int(httpx.get(f"{sandbox.url}/orders/stats", timeout=5).json()["cancellations"])


def test_a_refusal_downstream_is_a_final_failure(tenant, sandbox, django_user_model) -> None:
    compensation = _approved(tenant, sandbox, django_user_model, order_id="ord_missing")
    assert run_compensation(compensation.pk, worker="w") == "failed"
    record = compensation_record(compensation)
    assert record.state == RecordState.FAILED_FINAL and not record.error_retryable
    assert record.error["code"] == "HTTP_404"
    request_compensation(
        record=compensation.original, actor="olga", requester_id=None, source="console"
    )
    assert not ApprovalRequest.objects.filter(record=record, state="pending").exists()
    assert run_compensation(compensation.pk, worker="w") == RecordState.FAILED_FINAL


def test_a_request_the_allow_list_refused_runs_after_a_new_decision(
    tenant, sandbox, django_user_model, settings
) -> None:
    compensation = _approved(tenant, sandbox, django_user_model)
    settings.LEDGER_OUTBOUND_ALLOW_PRIVATE = False  # checked again when it is sent
    assert run_compensation(compensation.pk, worker="w") == "failed"
    record = compensation_record(compensation)
    assert record.error["code"] == "OUTBOUND_REFUSED" and record.error_retryable
    assert _cancellations(sandbox) == 0
    settings.LEDGER_OUTBOUND_ALLOW_PRIVATE = True
    assert run_compensation(compensation.pk, worker="w") == "not-approved"
    for _ in range(2):  # asked twice: one new approval request, one new entry
        request_compensation(
            record=compensation.original, actor="olga", requester_id=None, source="console"
        )
    record = compensation_record(compensation)
    assert ApprovalRequest.objects.filter(record=record, state="pending").count() == 1
    assert record.entries.count() == 2
    bob = make_user(django_user_model, "bob", tenant, "approver")
    decide_compensation(compensation=compensation, user=bob, approve=True, reason="again")
    assert run_compensation(compensation.pk, worker="w") == "succeeded"
    assert _cancellations(sandbox) == 1
    assert compensation_record(compensation).executions == 2


def test_a_lost_answer_after_a_5xx_is_looked_up_not_resent(
    tenant, sandbox, django_user_model
) -> None:
    compensation = _approved(tenant, sandbox, django_user_model)
    arm(sandbox, service="orders", operation="cancel", mode="error_5xx")
    assert run_compensation(compensation.pk, worker="w") == "uncertain"
    assert compensation_record(compensation).state == RecordState.UNKNOWN
    assert run_compensation(compensation.pk, worker="w") == RecordState.UNKNOWN
    assert _cancellations(sandbox) == 0


def _look_up_cancellations(tenant: Tenant, sandbox: SandboxServer) -> None:
    """cancel_order's downstream adapter: the sandbox's cancellations, by key."""
    DownstreamAdapter.objects.create(
        tenant=tenant,
        tool=Tool.objects.get(tenant=tenant, name="cancel_order"),
        url_template=f"{sandbox.url}/orders/cancellations/by-key/{{key}}",
        found_statuses=[200],
        not_found_statuses=[404],
        grace_seconds=0,
    )


@pytest.mark.parametrize(
    "fault",
    [
        {"mode": "timeout_after_commit", "hang_seconds": 3},
        {"mode": "reset_after_commit"},
        {"mode": "truncated_after_commit"},
    ],
    ids=["read-timeout", "reset-after-send", "truncated-body"],
)
def test_a_compensation_whose_answer_is_lost_is_looked_up_never_sent_again(
    tenant, sandbox, django_user_model, fault: dict[str, Any]
) -> None:
    """The downstream cancels, then its answer is lost: slower than the adapter's timeout, the
    connection reset, or the body cut short. The outcome is unknown; asking again and running
    again send nothing, and the look-up by key settles it: one request for the key."""
    compensation = _approved(tenant, sandbox, django_user_model)
    CompensationAdapter.objects.filter(tool__name="cancel_order").update(timeout_seconds=0.5)
    arm(sandbox, service="orders", operation="cancel", **fault)
    assert run_compensation(compensation.pk, worker="w") == "uncertain"
    record = compensation_record(compensation)
    assert record.state == RecordState.UNKNOWN and record.error["code"] == "NO_RESPONSE"
    request_compensation(
        record=compensation.original, actor="olga", requester_id=None, source="console"
    )
    assert run_compensation(compensation.pk, worker="w") == RecordState.UNKNOWN
    _look_up_cancellations(tenant, sandbox)
    assert reconcile_record(record.pk, worker="w") == "succeeded"
    stats = httpx.get(f"{sandbox.url}/orders/stats", timeout=5).json()
    assert stats["cancel_requests_per_key"] == {compensation.key: 1}
    assert stats["cancellations"] == 1


def test_a_compensation_that_could_not_connect_was_not_sent(
    tenant, sandbox, django_user_model
) -> None:
    compensation = _approved(tenant, sandbox, django_user_model)
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))  # bound, never listening: the connection is refused
        port = closed.getsockname()[1]
        Compensation.objects.filter(pk=compensation.pk).update(
            url=f"http://127.0.0.1:{port}/orders/objects/gone/cancel"
        )
        assert run_compensation(compensation.pk, worker="w") == "failed"
    record = compensation_record(compensation)
    assert record.state == RecordState.FAILED_FINAL and record.error_retryable
    assert record.error["code"] == "NOT_SENT"


def test_a_compensated_action_past_its_ttl_is_cleaned_up_with_its_link(
    tenant, sandbox, django_user_model
) -> None:
    compensation = _approved(tenant, sandbox, django_user_model)
    run_compensation(compensation.pk, worker="w")
    IdempotencyRecord.objects.filter(pk=compensation.original_id).update(
        expires_at=timezone.now() - timedelta(days=1)
    )
    assert cleanup_expired_records() == 1
    assert not Compensation.objects.exists()
    assert compensation_record(compensation).state == RecordState.SUCCEEDED  # its own TTL


@pytest.mark.django_db(transaction=True)
def test_two_workers_at_once_send_one_cancel(tenant, sandbox, django_user_model) -> None:
    compensation = _approved(tenant, sandbox, django_user_model)
    arm(sandbox, service="orders", operation="cancel", mode="latency", latency_ms=300)
    results: list[str] = []
    start = threading.Barrier(2)

    def work(name: str) -> None:
        try:
            start.wait()
            results.append(run_compensation(compensation.pk, worker=name))
        finally:
            connection.close()

    threads = [threading.Thread(target=work, args=(f"w{n}",)) for n in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert sorted(results)[-1] == "succeeded" and len(results) == 2
    assert sorted(results)[0] in (RecordState.EXECUTING, RecordState.SUCCEEDED)
    stats = httpx.get(f"{sandbox.url}/orders/stats", timeout=5).json()
    assert stats["cancel_requests_per_key"] == {compensation.key: 1}


def test_an_action_of_a_rolled_back_combination_can_still_be_compensated(
    tenant, sandbox, django_user_model
) -> None:
    for label in ("good", "bad"):  # bad replaces good, which the rollback restores
        bad, _ = combinations.create_combination(
            tenant=tenant,
            label=label,
            actor="t",
            source="api",
            model="m",
            prompt=label,
            rules="r",
            tool_schema="t",
            data_version="d",
        )
        combinations.activate(tenant=tenant, combination_id=bad.pk, actor="t", source="api")
    compensation = _approved(tenant, sandbox, django_user_model)
    assert compensation.original.combination_id == bad.pk
    combinations.rollback(
        tenant=tenant, combination_id=bad.pk, actor="mia", source="console", reason="bad prompt"
    )
    assert Run.objects.get(run_id="run-1").status == Run.Status.HALTED
    # A halt stops the agent, never the clean-up: the approval given stays good.
    assert run_compensation(compensation.pk, worker="w") == "succeeded"
    assert _cancellations(sandbox) == 1
    assert compensation_record(compensation).entries.get().run.run_id == "run-1:compensate"


def test_asking_again_after_the_request_expired_asks_a_human_again(
    tenant, sandbox, django_user_model
) -> None:
    compensation = _approved(tenant, sandbox, django_user_model, approve=False)
    record = compensation_record(compensation)
    ApprovalRequest.objects.filter(record=record).update(state="expired")
    assert run_compensation(compensation.pk, worker="w") == "not-approved"
    request_compensation(
        record=compensation.original, actor="olga", requester_id=None, source="console"
    )
    assert ApprovalRequest.objects.filter(record=record, state="pending").count() == 1
    bob = make_user(django_user_model, "bob", tenant, "approver")
    decide_compensation(compensation=compensation, user=bob, approve=True, reason="still needed")
    assert run_compensation(compensation.pk, worker="w") == "succeeded"
    assert _cancellations(sandbox) == 1


def test_the_run_compensations_are_entered_in_is_started_once_and_audited(
    tenant, sandbox, django_user_model
) -> None:
    compensation = _approved(tenant, sandbox, django_user_model, approve=False)
    request_compensation(
        record=compensation.original, actor="olga", requester_id=None, source="console"
    )
    run = Run.objects.get(run_id="run-1:compensate")
    assert run.combination_id is None and run.user_id == compensation.original.run.user_id
    started = AuditEvent.objects.get(action="run.started", target_id=str(run.pk))
    assert (started.actor, started.source) == ("olga", "console")
    assert started.after["combination"] is None


def _order_declared(
    tenant: Tenant,
    sandbox: SandboxServer,
    arguments: dict[str, str],
    *,
    tool_input: dict[str, Any],
    result: dict[str, Any],
    classification: str = "internal",
    **cancel_declared: Any,
) -> IdempotencyRecord:
    """An order that happened downstream and succeeded in the ledger, its tool declaring
    cancel_order (run through the sandbox; registered with ``cancel_declared``) with
    ``arguments`` as its compensation."""
    orders = make_tool(tenant, "create_order")
    cancel = make_tool(tenant, "cancel_order", **cancel_declared)
    CompensationAdapter.objects.create(
        tenant=tenant,
        tool=cancel,
        url_template=f"{sandbox.url}/orders/objects/{{order_id}}/cancel",
        success_statuses=[200, 201],
    )
    declare_compensation(
        tool=orders,
        compensating_tool="cancel_order",
        arguments=arguments,
        actor="test",
        source="system",
    )
    api = client_for(tenant)
    api.start_run()
    call = api.call("create_order", tool_input, data_classification=classification).json()
    order = httpx.post(
        f"{sandbox.url}/orders/objects",
        json={"reference": "c-1"},
        headers={"Idempotency-Key": call["idempotency_key"]},
    ).json()
    done = api.post(
        f"/calls/{call['call_id']}/complete",
        {"fencing_token": 1, "outcome": "succeeded", "result": {"id": order["id"], **result}},
    )
    assert done.status_code == 200, done.content
    return IdempotencyRecord.objects.get(key=call["idempotency_key"])


@pytest.mark.parametrize(
    ("argument", "tool_input", "result", "marker"),
    [
        ("input.session", {"cart": "c-1", "session": "s-123"}, {}, "[REDACTED]"),
        ("result.contact", {"cart": "c-1"}, {"contact": "ann@example.com"}, "[REDACTED:email]"),
        ("input.card", {"cart": "c-1", "card": "4111 1111 1111 1111"}, {}, "[REDACTED"),
        ("result.note", {"cart": "c-1"}, {"note": "paid by 4111 1111 1111 1111"}, "[REDACTED"),
    ],
)
def test_a_compensation_that_needs_a_redacted_value_is_refused_and_nothing_is_sent(
    tenant, sandbox, argument: str, tool_input: dict, result: dict, marker: str
) -> None:
    record = _order_declared(
        tenant,
        sandbox,
        {"order_id": "result.id", "detail": argument},
        tool_input=tool_input,
        result=result,
    )
    with pytest.raises(InvalidInput, match=re.escape(argument)) as refused:
        request_compensation(record=record, actor="olga", requester_id=None, source="console")
    assert "redacted" in refused.value.message
    assert not Compensation.objects.exists()
    assert _cancellations(sandbox) == 0
    stats = httpx.get(f"{sandbox.url}/orders/stats", timeout=5).json()
    assert stats["cancel_requests_per_key"] == {}


def test_a_restricted_action_cannot_be_compensated_from_what_the_ledger_keeps(
    tenant, sandbox
) -> None:
    record = _order_declared(
        tenant,
        sandbox,
        {"order_id": "result.id"},
        tool_input={"cart": "c-1"},
        result={},
        classification="restricted",
    )
    with pytest.raises(InvalidInput, match="restricted") as refused:
        request_compensation(record=record, actor="olga", requester_id=None, source="console")
    assert "result.id" in refused.value.message
    assert not Compensation.objects.exists() and _cancellations(sandbox) == 0


def test_a_compensation_whose_stored_arguments_hold_a_redacted_value_is_never_sent(
    tenant, sandbox, django_user_model
) -> None:
    """Built before redacted values were refused (or written by hand): the worker refuses it,
    for good, without sending it."""
    compensation = _approved(tenant, sandbox, django_user_model)
    Compensation.objects.filter(pk=compensation.pk).update(
        arguments={**compensation.arguments, "contact": "[REDACTED:email]"}
    )
    assert run_compensation(compensation.pk, worker="w") == "failed"
    record = compensation_record(compensation)
    assert record.error["code"] == "REDACTED_ARGUMENT" and not record.error_retryable
    assert "contact" in record.error["message"]
    assert _cancellations(sandbox) == 0


def test_a_compensations_entry_and_record_are_classified_from_its_arguments(
    tenant, sandbox
) -> None:
    """The compensating call is classified as any call is (``classify_tool_call``): a tool
    whose argument carries a command is classified from the command it is given."""
    record = _order_declared(
        tenant,
        sandbox,
        {"order_id": "result.id", "command": "input.undo"},
        tool_input={"cart": "c-1", "undo": "rm -rf /srv/carts/c-1"},
        result={},
        code_argument=DecidingArgument(PerCall.SHELL, "command"),
    )
    compensation = request_compensation(
        record=record, actor="olga", requester_id=None, source="console"
    )
    tool = Tool.objects.get(tenant=tenant, name="cancel_order")
    expected = classify_tool_call(tool, compensation.arguments)
    assert expected != stored_classification(tool)  # the command decides, not the tool
    entry = compensation_record(compensation).entries.get()
    assert entry_classification(entry) == expected
    assert entry.input == redact_for_storage(
        compensation.arguments, DataClassification(record.data_classification)
    )
    assert compensation_record(compensation).classified_as == expected.idempotency


def test_a_compensations_result_that_fails_its_output_schema_is_uncertain_not_a_success(
    tenant, sandbox, django_user_model
) -> None:
    """The downstream answered 2xx, but not with what cancel_order declares it returns: the
    cancellation may have happened, so its outcome is unknown (and looked up), as an ordinary
    call's malformed result is."""
    record = _order_declared(
        tenant,
        sandbox,
        {"order_id": "result.id"},
        tool_input={"cart": "c-1"},
        result={},
        output_schema={"type": "object", "required": ["refund_id"]},
    )
    operator = make_user(django_user_model, "olga", tenant, "operator")
    compensation = request_compensation(
        record=record, actor="olga", requester_id=operator.pk, source="console"
    )
    approver = make_user(django_user_model, "alice", tenant, "approver")
    decide_compensation(compensation=compensation, user=approver, approve=True, reason="undo")
    assert run_compensation(compensation.pk, worker="w") == "uncertain"
    settled = compensation_record(compensation)
    assert settled.state == RecordState.UNKNOWN and settled.result is None
    assert settled.error["code"] == "MALFORMED_RESULT"
    assert "refund_id" in settled.error["message"]
    assert settled.entries.get().status == "uncertain"
    assert _cancellations(sandbox) == 1  # sent once; looked up, never sent again


def test_the_worker_uses_a_compensations_approval_as_the_worker(
    tenant, sandbox, django_user_model
) -> None:
    compensation = _approved(tenant, sandbox, django_user_model)
    assert run_compensation(compensation.pk, worker="w") == "succeeded"
    used = AuditEvent.objects.get(action="approval.consumed")
    assert (used.actor, used.source) == ("worker:w", "worker")


def test_an_expired_approval_is_voided_by_the_worker_and_nothing_is_sent(
    tenant, sandbox, django_user_model
) -> None:
    compensation = _approved(tenant, sandbox, django_user_model)
    ApprovalRequest.objects.filter(record=compensation_record(compensation)).update(
        expires_at=timezone.now() - timedelta(seconds=1)
    )
    assert run_compensation(compensation.pk, worker="w") == "approval-void"
    voided = AuditEvent.objects.get(action="approval.invalidated")
    assert (voided.actor, voided.source) == ("worker:w", "worker")
    assert compensation_record(compensation).state == RecordState.RESERVED
    assert _cancellations(sandbox) == 0
