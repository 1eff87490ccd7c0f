"""The keys the ledger builds (up to ledger.keys.MAX_KEY_LENGTH characters) against both
services on agent_ledger_downstream, end to end through the Python client and the documented
tool; and input the kit cannot take answered 4xx problem+json, never 500."""

from __future__ import annotations

import uuid
from typing import Any

import httpx
import pytest

from agent_ledger_client import CallContext, LedgerClient
from ledger.domain import RecordState
from ledger.keys import MAX_KEY_LENGTH
from ledger.models import ApiToken, IdempotencyRecord, Tenant, Tool
from reconcile.models import DownstreamAdapter, ReconcileAttempt
from reconcile.services import reconcile_record
from tests.downstream.conftest import TOKEN, Service

pytestmark = [
    pytest.mark.django_db,
    pytest.mark.slow,
    pytest.mark.usefixtures("private_downstreams"),
]

PROBLEM = "application/problem+json"


def _invoice(customer: str) -> dict[str, Any]:
    return {"customer": customer, "amount_cents": 1250}


def _count(service: Service, customer: str) -> int:
    response = httpx.get(f"{service.url}/invoices/stats", params={"customer": customer}, timeout=5)
    return int(response.json()["invoices"])


def _bill(service: Service, customer: str, fault: str = "") -> Any:
    """The tool as docs/downstream.md has it: the ledger's key as the Idempotency-Key of the
    marked route."""

    def execute(call: CallContext) -> Any:
        headers = {"Idempotency-Key": call.idempotency_key}
        if fault:
            headers["X-Fault"] = fault
        response = httpx.post(
            f"{service.url}/invoices", json=_invoice(customer), headers=headers, timeout=5
        )
        response.raise_for_status()
        return response.json()

    return execute


def test_a_key_as_long_as_the_ledger_builds_is_kept_replayed_and_found(service: Service) -> None:
    key, customer = "k" * (MAX_KEY_LENGTH - 36) + str(uuid.uuid4()), str(uuid.uuid4())
    headers = {"Idempotency-Key": key}
    first = httpx.post(f"{service.url}/invoices", json=_invoice(customer), headers=headers)
    again = httpx.post(f"{service.url}/invoices", json=_invoice(customer), headers=headers)
    assert first.status_code == again.status_code == 201, first.text
    assert again.headers.get("Idempotent-Replayed") == "true"
    found = httpx.get(f"{service.url}/idempotency/{key}", params={"access_token": TOKEN})
    assert found.status_code == 200 and found.json()["idempotency_key"] == key
    assert _count(service, customer) == 1


@pytest.mark.django_db(transaction=True)
def test_a_long_run_ids_call_whose_answer_is_lost_is_found_by_the_look_up(
    service: Service, live_server: Any
) -> None:
    """A run id of 190 characters makes a key longer than 255; the service commits, dies
    before answering, and the worker's look-up finds the invoice: one row, succeeded."""
    tenant = Tenant.objects.create(slug="acme", name="Acme")
    _token, plaintext = ApiToken.issue(tenant=tenant, name="runtime")
    customer, run_id = str(uuid.uuid4()), "r" * 154 + str(uuid.uuid4())
    assert len(run_id) == 190
    with LedgerClient(live_server.url, plaintext, request_timeout=10) as ledger:
        ledger.register_tool("create_invoice", description="Bill a customer.")
        DownstreamAdapter.objects.create(
            tenant=tenant,
            tool=Tool.objects.get(tenant=tenant, name="create_invoice"),
            url_template=f"{service.url}/idempotency/{{key}}?access_token={TOKEN}",
            found_statuses=[200],
            not_found_statuses=[404],
            grace_seconds=0,
        )
        with ledger.run(user_id="u1", run_id=run_id) as run:
            lost = run.call(
                "create_invoice",
                _invoice(customer),
                business_object_id=customer,
                execute=_bill(service, customer, fault="exit-after-commit"),
            )
            assert lost["code"] == "SIDE_EFFECT_UNCERTAIN", lost
            key = lost["metadata"]["idempotency_key"]
            assert len(key) > 255
            service.process.ensure_running()  # what its supervisor does
            record = IdempotencyRecord.objects.get(tenant=tenant, key=key)
            settled = reconcile_record(record.pk, worker="w1")
            attempts = ReconcileAttempt.objects.filter(record=record).values("outcome", "detail")
            assert settled == "succeeded", list(attempts)
            retry = run.call(
                "create_invoice",
                _invoice(customer),
                business_object_id=customer,
                execute=_bill(service, customer),
            )
    record.refresh_from_db()
    assert record.state == RecordState.SUCCEEDED
    assert record.result["evidence"]["idempotency_key"] == key
    assert retry["ok"] and retry["metadata"]["replayed"], retry
    assert _count(service, customer) == 1


@pytest.mark.django_db(transaction=True)
def test_a_non_ascii_users_call_whose_answer_is_lost_is_found_by_the_look_up(
    service: Service, live_server: Any
) -> None:
    """A user ``josé`` and a business object ``Café-…``: the ledger's key is printable ASCII,
    so the service keeps it, and the worker's look-up finds the invoice: one row."""
    tenant = Tenant.objects.create(slug="acme", name="Acme")
    _token, plaintext = ApiToken.issue(tenant=tenant, name="runtime")
    customer = str(uuid.uuid4())
    with LedgerClient(live_server.url, plaintext, request_timeout=10) as ledger:
        ledger.register_tool("create_invoice", description="Bill a customer.")
        DownstreamAdapter.objects.create(
            tenant=tenant,
            tool=Tool.objects.get(tenant=tenant, name="create_invoice"),
            url_template=f"{service.url}/idempotency/{{key}}?access_token={TOKEN}",
            found_statuses=[200],
            not_found_statuses=[404],
            grace_seconds=0,
        )
        with ledger.run(user_id="josé", run_id="commande-été") as run:
            lost = run.call(
                "create_invoice",
                _invoice(customer),
                business_object_id=f"Café-{customer}",
                execute=_bill(service, customer, fault="exit-after-commit"),
            )
            assert lost["code"] == "SIDE_EFFECT_UNCERTAIN", lost
            key = lost["metadata"]["idempotency_key"]
            assert ":jos%C3%A9:" in key and f":Caf%C3%A9-{customer}" in key
            service.process.ensure_running()
            record = IdempotencyRecord.objects.get(tenant=tenant, key=key)
            assert reconcile_record(record.pk, worker="w1") == "succeeded"
            retry = run.call(
                "create_invoice",
                _invoice(customer),
                business_object_id=f"Café-{customer}",
                execute=_bill(service, customer),
            )
    assert retry["ok"] and retry["metadata"]["replayed"], retry
    assert _count(service, customer) == 1


def _lookup(service: Service, path: str) -> httpx.Response:
    separator = "&" if "?" in path else "?"
    return httpx.get(f"{service.url}/idempotency/{path}{separator}access_token={TOKEN}", timeout=5)


@pytest.mark.parametrize(
    "path",
    [
        "",
        "a%00b",
        "a%01b",
        "a%7Fb",
        "a%0Ab",
        "caf%C3%A9",
        "k" * (MAX_KEY_LENGTH + 1),
        "abc?scope=a%00b",
    ],
    ids=["empty", "nul", "control", "delete", "newline", "not-ascii", "too-long", "nul-in-scope"],
)
def test_a_look_up_the_kit_cannot_take_is_a_400_problem(service: Service, path: str) -> None:
    answer = _lookup(service, path)
    assert answer.status_code == 400, answer.text
    assert answer.headers["Content-Type"].startswith(PROBLEM)


@pytest.mark.parametrize(
    "key",
    ["k" * (MAX_KEY_LENGTH + 1), "a\tb", "caf\u00e9".encode()],
    ids=["too-long", "tab", "not-ascii"],
)
def test_a_key_the_kit_cannot_take_is_a_400_problem_and_runs_nothing(
    service: Service, key: str | bytes
) -> None:
    customer = str(uuid.uuid4())
    answer = httpx.post(
        f"{service.url}/invoices", json=_invoice(customer), headers={"Idempotency-Key": key}
    )
    assert answer.status_code == 400, answer.text
    assert answer.headers["Content-Type"].startswith(PROBLEM)
    assert _count(service, customer) == 0


@pytest.mark.parametrize(
    "body",
    [b"[" * 100_000, b'{"customer": "x", "amount_cents": 1' + b"0" * 5000 + b"}", b"\xff\xfe{"],
    ids=["nested", "huge-number", "not-utf-8"],
)
def test_a_json_body_that_does_not_parse_is_a_4xx_never_a_500(
    service: Service, body: bytes
) -> None:
    answer = httpx.post(
        f"{service.url}/invoices",
        content=body,
        headers={"Idempotency-Key": str(uuid.uuid4()), "Content-Type": "application/json"},
    )
    assert 400 <= answer.status_code < 500, answer.text
