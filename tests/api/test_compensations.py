"""The compensation endpoints: declare (a tool's, one call's), preview, request, a run's saga."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from django.db.models.functions import Now

from ledger.models import AuditEvent, Compensation, IdempotencyRecord, Tenant
from reconcile.models import CompensationAdapter
from sandbox.server import SandboxServer
from tests.api.conftest import ApiClient
from tests.factories import make_tool

pytestmark = pytest.mark.django_db
DOC = Path(__file__).resolve().parents[2] / "docs" / "compensation.md"


@pytest.fixture(autouse=True)
def _shop(tenant: Tenant, sandbox: SandboxServer, settings: Any) -> None:
    settings.LEDGER_OUTBOUND_ALLOW_PRIVATE = True  # the sandbox listens on 127.0.0.1
    make_tool(tenant, "create_order")
    cancel = make_tool(tenant, "cancel_order")
    CompensationAdapter.objects.create(
        tenant=tenant,
        tool=cancel,
        url_template=f"{sandbox.url}/orders/objects/{{order_id}}/cancel",
        success_statuses=[201],
    )


def _declaration_in_the_docs() -> dict[str, Any]:
    block = re.search(r"```json\n(.*?)```", DOC.read_text(), re.S)
    assert block is not None
    return json.loads(block.group(1))


def _order(api: ApiClient, step: str = "step-1", run_id: str = "run-1") -> dict[str, Any]:
    call = api.call("create_order", {"cart": f"cart-{step}"}, step_id=step, run_id=run_id).json()
    api.post(
        f"/calls/{call['call_id']}/complete",
        {"fencing_token": 1, "outcome": "succeeded", "result": {"id": f"ord_{step}"}},
    )
    return call


def test_the_documented_declaration_is_accepted_and_audited(api: ApiClient) -> None:
    answer = api.post("/compensations/declarations", _declaration_in_the_docs())
    assert answer.status_code == 200, answer.content
    assert answer.json()["arguments"] == {"order_id": "result.id", "cart": "input.cart"}
    event = AuditEvent.objects.get(action="compensation.declared")
    assert event.after["compensating_tool"] == "cancel_order"


@pytest.mark.parametrize(
    ("body", "status"),
    [
        (
            {"tool": "create_order", "compensating_tool": "nope", "arguments": {"a": "result.id"}},
            404,
        ),
        (
            {"tool": "nope", "compensating_tool": "cancel_order", "arguments": {"a": "result.id"}},
            404,
        ),
        (
            {"tool": "create_order", "compensating_tool": "cancel_order", "arguments": {"a": "id"}},
            400,
        ),
        (
            {
                "tool": "create_order",
                "compensating_tool": "create_order",
                "arguments": {"a": "result.id"},
            },
            400,
        ),
        ({"tool": "create_order", "compensating_tool": "cancel_order", "arguments": {}}, 400),
    ],
)
def test_a_bad_declaration_is_refused_and_changes_nothing(
    api: ApiClient, body: dict[str, Any], status: int
) -> None:
    assert api.post("/compensations/declarations", body).status_code == status
    assert not AuditEvent.objects.filter(action="compensation.declared").exists()


def test_preview_request_and_get(api: ApiClient) -> None:
    api.post("/compensations/declarations", _declaration_in_the_docs())
    api.start_run()
    call = _order(api)
    key = call["idempotency_key"]
    preview = api.get("/compensations/preview", key=key)
    assert preview.status_code == 200, preview.content
    assert preview.json()["arguments"] == {"order_id": "ord_step-1", "cart": "cart-step-1"}
    assert preview.json()["idempotency_key"] == f"{key}:compensate"
    assert preview.json()["url"].endswith("/orders/objects/ord_step-1/cancel")
    assert not Compensation.objects.exists()  # a preview writes nothing

    first = api.post("/compensations", {"key": key})
    assert first.status_code == 201, first.content
    assert first.json()["state"] == "reserved" and first.json()["approval_state"] == "pending"
    again = api.post("/compensations", {"key": key})
    assert again.status_code == 200 and again.json()["call"] == first.json()["call"]
    assert Compensation.objects.count() == 1
    assert api.get("/compensations", key=key).json()["approval_id"] == first.json()["approval_id"]
    record = api.get("/records", key=key).json()
    assert record["compensation"]["role"] == "compensated_by"
    assert record["compensation"]["key"] == f"{key}:compensate"
    other_way = api.get("/records", key=f"{key}:compensate").json()
    assert other_way["compensation"] == {
        "role": "compensates",
        "key": key,
        "record_id": IdempotencyRecord.objects.get(key=key).pk,
        "state": "succeeded",
    }


def test_the_runtime_registers_one_calls_compensation_before_it_runs(api: ApiClient) -> None:
    api.post("/compensations/declarations", _declaration_in_the_docs())
    api.start_run()
    call = api.call("create_order", {"cart": "c"}).json()
    own = {
        "tool": "create_order",
        "compensating_tool": "cancel_order",
        "arguments": {"order_id": "result.order.id"},
        "call_id": call["call_id"],
    }
    assert api.post("/compensations/declarations", own).status_code == 200
    api.post(
        f"/calls/{call['call_id']}/complete",
        {"fencing_token": 1, "outcome": "succeeded", "result": {"order": {"id": "ord_9"}}},
    )
    preview = api.get("/compensations/preview", key=call["idempotency_key"]).json()
    assert preview["arguments"] == {"order_id": "ord_9"}  # the call's own wins
    late = api.post("/compensations/declarations", own)
    assert late.status_code == 409  # the call has completed


def test_only_a_succeeded_action_is_compensated(api: ApiClient) -> None:
    api.post("/compensations/declarations", _declaration_in_the_docs())
    api.start_run()
    call = api.call("create_order", {"cart": "c"}).json()
    answer = api.post("/compensations", {"key": call["idempotency_key"]})
    assert answer.status_code == 409 and "succeeded" in answer.json()["detail"]
    assert not Compensation.objects.exists()


def test_a_tool_without_a_declaration_has_no_compensation(api: ApiClient) -> None:
    api.start_run()
    call = _order(api)
    answer = api.get("/compensations/preview", key=call["idempotency_key"])
    assert answer.status_code == 400 and "declares no compensation" in answer.json()["detail"]


def test_a_compensation_to_a_private_address_is_refused_unless_allowed(
    api: ApiClient, settings: Any
) -> None:
    settings.LEDGER_OUTBOUND_ALLOW_PRIVATE = False
    api.post("/compensations/declarations", _declaration_in_the_docs())
    api.start_run()
    call = _order(api)
    answer = api.post("/compensations", {"key": call["idempotency_key"]})
    assert answer.status_code == 400 and "non-public address" in answer.json()["detail"]
    assert not Compensation.objects.exists()


def test_another_tenants_action_is_not_found(api: ApiClient, other_api: ApiClient) -> None:
    api.post("/compensations/declarations", _declaration_in_the_docs())
    api.start_run()
    call = _order(api)
    assert other_api.get("/compensations/preview", key=call["idempotency_key"]).status_code == 404
    assert other_api.post("/compensations", {"key": call["idempotency_key"]}).status_code == 404
    api.post("/compensations", {"key": call["idempotency_key"]})
    assert other_api.get("/compensations", key=call["idempotency_key"]).status_code == 404
    assert other_api.get("/compensations/runs/run-1").status_code == 404


def test_a_runs_saga_is_previewed_newest_first_then_requested(api: ApiClient) -> None:
    api.post("/compensations/declarations", _declaration_in_the_docs())
    api.start_run()
    calls = [_order(api, step=f"s{n}") for n in range(3)]
    preview = api.get("/compensations/runs/run-1").json()
    assert [s["original_key"] for s in preview["steps"]] == [
        c["idempotency_key"] for c in reversed(calls)
    ]
    assert {s["state"] for s in preview["steps"]} == {"planned"}
    requested = api.post("/compensations/runs/run-1").json()
    assert {s["state"] for s in requested["steps"]} == {"reserved"}
    assert Compensation.objects.count() == 3


def test_prometheus_counts_compensations_by_state(api: ApiClient, settings: Any) -> None:
    from django.test import Client
    from prometheus_client.parser import text_string_to_metric_families

    settings.METRICS_TOKEN = "scrape-secret"
    api.post("/compensations/declarations", _declaration_in_the_docs())
    api.start_run()
    for n in range(2):
        api.post("/compensations", {"key": _order(api, step=f"s{n}")["idempotency_key"]})
    done = Compensation.objects.first()
    assert done is not None
    IdempotencyRecord.objects.filter(key=done.key).update(state="succeeded", expires_at=Now())
    response = Client().get(
        "/metrics", secure=True, headers={"Authorization": "Bearer scrape-secret"}
    )
    families = {f.name: f for f in text_string_to_metric_families(response.content.decode())}
    samples = {s.labels["state"]: s.value for s in families["agent_ledger_compensations"].samples}
    assert samples == {"compensated": 1, "reserved": 1}
