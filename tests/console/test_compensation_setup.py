"""A manager sets up a tool's compensation on the Tools page, with no Django admin: the
compensating tool, the argument mapping (the API's declaration rule) and the compensating
tool's adapters. Bad input is shown beside its field and changes nothing; other roles read it.
Then two other people request and approve it, and a worker cancels the sandbox's order once."""

from __future__ import annotations

import html
import re
from typing import Any

import httpx
import pytest

from ledger.models import AuditEvent, Compensation, DeclaredCompensation, IdempotencyRecord
from reconcile.models import CompensationAdapter, DownstreamAdapter
from reconcile.tasks import run_compensations
from sandbox.server import SandboxServer
from tests.api.conftest import client_for
from tests.console.conftest import make_user, signed_in
from tests.factories import make_tool

pytestmark = pytest.mark.django_db

NOWHERE = "http://127.0.0.1:9"


def _setup(base: str = NOWHERE, **changes: str) -> dict[str, str]:
    """The Tools page's compensation form: create_order is undone by cancel_order."""
    return {
        "tool": "create_order",
        "compensating_tool": "cancel_order",
        "arguments": "order_id = result.id",
        "url_template": f"{base}/orders/objects/{{order_id}}/cancel",
        "success_statuses": "200, 201",
        "lookup_url_template": f"{base}/orders/cancellations/by-key/{{key}}",
        **changes,
    }


@pytest.fixture
def tools(tenant: Any, settings: Any) -> None:
    settings.LEDGER_OUTBOUND_ALLOW_PRIVATE = True  # the sandbox listens on 127.0.0.1
    make_tool(tenant, "create_order")
    make_tool(tenant, "cancel_order")


def _error_of(page: str, field: str) -> str:
    """The error shown beside ``field`` of the compensation form (empty: none)."""
    found = re.search(rf'<span class="field-error" id="comp-{field}-error"[^>]*>(.*?)</span>', page)
    return html.unescape(found.group(1)) if found else ""


def _nothing_written() -> None:
    assert not DeclaredCompensation.objects.exists()
    assert not CompensationAdapter.objects.exists()
    assert not DownstreamAdapter.objects.exists()
    assert not AuditEvent.objects.filter(action__startswith="compensation.").exists()


def _ordered(tenant: Any, sandbox: SandboxServer) -> tuple[IdempotencyRecord, dict]:
    """An order made in the sandbox with its key, recorded as succeeded."""
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
        {"fencing_token": 1, "outcome": "succeeded", "result": order},
    )
    return IdempotencyRecord.objects.get(key=call["idempotency_key"]), order


def test_a_manager_sets_up_a_compensation_that_two_others_then_run_once(
    tenant, tools, sandbox, django_user_model
) -> None:
    mia = signed_in(make_user(django_user_model, "mia", tenant, "manager"))
    saved = mia.post("/tools/compensation", _setup(sandbox.url))
    assert saved.status_code == 302, saved.content.decode()
    declared = DeclaredCompensation.objects.get(tool__name="create_order")
    assert declared.arguments == {"order_id": "result.id"} and declared.declared_by == "mia"
    adapter = CompensationAdapter.objects.get(tool__name="cancel_order")
    assert adapter.url_template == f"{sandbox.url}/orders/objects/{{order_id}}/cancel"
    assert adapter.success_statuses == [200, 201]
    lookup = DownstreamAdapter.objects.get(tool__name="cancel_order")
    assert lookup.url_template == f"{sandbox.url}/orders/cancellations/by-key/{{key}}"
    for action in ("compensation.declared", "compensation.adapter_set"):
        event = AuditEvent.objects.get(action=action)
        assert (event.actor, event.source) == ("mia", "console")

    record, order = _ordered(tenant, sandbox)
    olga = signed_in(make_user(django_user_model, "olga", tenant, "operator"))
    alice = signed_in(make_user(django_user_model, "alice", tenant, "approver"))
    run_page = olga.get(f"/ledger/runs/{record.run_id}/").content.decode()
    assert f"/compensations/records/{record.pk}/" in run_page
    olga.post(f"/compensations/records/{record.pk}/request", {"reason": "the cart was abandoned"})
    alice.post(
        f"/compensations/records/{record.pk}/decide",
        {"decision": "approve", "reason": "the customer asked"},
    )
    compensation = Compensation.objects.get(original=record)
    assert run_compensations([compensation.pk]) == ["succeeded"]
    stats = httpx.get(f"{sandbox.url}/orders/stats", timeout=5).json()
    assert stats["cancellations_per_object"] == {order["id"]: 1}
    assert stats["cancel_requests_per_key"] == {compensation.key: 1}


def test_an_admin_sets_one_up_too(tenant, tools, django_user_model) -> None:
    ada = signed_in(make_user(django_user_model, "ada", tenant, "admin"))
    assert ada.post("/tools/compensation", _setup()).status_code == 302
    assert DeclaredCompensation.objects.get().declared_by == "ada"


@pytest.mark.parametrize("role", ["operator", "approver", ""])
def test_no_one_but_a_manager_sets_one_up(tenant, tools, django_user_model, role: str) -> None:
    client = signed_in(make_user(django_user_model, f"user-{role}", tenant, role))
    assert client.post("/tools/compensation", _setup()).status_code == 403
    _nothing_written()


@pytest.mark.parametrize(
    ("field", "changes", "says"),
    [
        ("arguments", {"arguments": "order_id = id"}, "must be a path starting with input."),
        ("arguments", {"arguments": "order_id"}, "name = path"),
        ("arguments", {"arguments": "[]"}, "at least one argument"),
        ("compensating_tool", {"compensating_tool": "create_order"}, "cannot compensate itself"),
        (
            "url_template",
            {"url_template": f"{NOWHERE}/orders/objects/{{order}}/cancel"},
            "order",
        ),
        ("url_template", {"url_template": "ftp://example.com/{order_id}"}, "http(s)"),
        ("success_statuses", {"success_statuses": "ok"}, "status"),
        ("success_statuses", {"success_statuses": "200, 700"}, "700"),
        ("lookup_url_template", {"lookup_url_template": f"{NOWHERE}/by-key/"}, "{key}"),
    ],
)
def test_bad_input_is_shown_beside_its_field_and_changes_nothing(
    tenant, tools, django_user_model, field: str, changes: dict[str, str], says: str
) -> None:
    mia = signed_in(make_user(django_user_model, "mia", tenant, "manager"))
    answer = mia.post("/tools/compensation", _setup(**changes))
    assert answer.status_code == 400
    page = answer.content.decode()
    assert says in _error_of(page, field), page
    assert all(html.escape(value) in page for value in changes.values())  # what was typed
    _nothing_written()


def test_a_url_the_ledger_may_not_call_is_refused_with_the_reason(
    tenant, tools, django_user_model, settings
) -> None:
    settings.LEDGER_OUTBOUND_ALLOW_PRIVATE = False
    mia = signed_in(make_user(django_user_model, "mia", tenant, "manager"))
    page = mia.post("/tools/compensation", _setup()).content.decode()
    assert "non-public address" in _error_of(page, "url_template")
    assert "non-public address" in _error_of(page, "lookup_url_template")
    _nothing_written()


def test_a_refused_change_keeps_the_compensation_as_it_was(
    tenant, tools, django_user_model
) -> None:
    mia = signed_in(make_user(django_user_model, "mia", tenant, "manager"))
    mia.post("/tools/compensation", _setup())
    events = AuditEvent.objects.count()
    changed = _setup(arguments="order_id = result.order_id", lookup_url_template=f"{NOWHERE}/x")
    assert mia.post("/tools/compensation", changed).status_code == 400
    assert DeclaredCompensation.objects.get().arguments == {"order_id": "result.id"}
    assert DownstreamAdapter.objects.get().url_template.endswith("/by-key/{key}")
    assert AuditEvent.objects.count() == events


def test_other_roles_read_the_compensation_and_have_no_form(
    tenant, tools, django_user_model
) -> None:
    signed_in(make_user(django_user_model, "mia", tenant, "manager")).post(
        "/tools/compensation", _setup()
    )
    olga = signed_in(make_user(django_user_model, "olga", tenant, "operator"))
    page = olga.get("/tools/").content.decode()
    assert "order_id = result.id" in page
    assert html.escape(f"{NOWHERE}/orders/objects/{{order_id}}/cancel") in page
    assert 'action="/tools/compensation"' not in page


def test_a_manager_changes_a_compensation_from_its_row(tenant, tools, django_user_model) -> None:
    mia = signed_in(make_user(django_user_model, "mia", tenant, "manager"))
    mia.post("/tools/compensation", _setup())
    page = mia.get("/tools/", {"compensation": "create_order"}).content.decode()
    assert "order_id = result.id</textarea>" in page
    assert f'value="{NOWHERE}/orders/cancellations/by-key/{{key}}"' in page
