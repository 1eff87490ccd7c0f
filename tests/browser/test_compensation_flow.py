"""A compensation in real Chromium: an operator requests it from the run's page, an approver
decides it with a reason, a worker runs it, and the action shows compensated."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from playwright.sync_api import Browser, Page

from ledger.models import Compensation, Tenant
from reconcile.compensations import declare_compensation
from reconcile.models import CompensationAdapter
from reconcile.tasks import run_compensations
from sandbox.server import SandboxServer
from tests.api.conftest import client_for
from tests.browser.conftest import _page, console_user, shot, sign_in
from tests.factories import make_tool

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def test_an_operator_requests_and_an_approver_runs_a_compensation(
    page: Page,
    browser: Browser,
    live_server: Any,
    django_user_model: Any,
    sandbox: SandboxServer,
    settings: Any,
) -> None:
    settings.LEDGER_OUTBOUND_ALLOW_PRIVATE = True  # the sandbox listens on 127.0.0.1
    tenant = Tenant.objects.create(slug="acme", name="Acme")
    orders = make_tool(tenant, "create_order")
    cancel = make_tool(tenant, "cancel_order")
    CompensationAdapter.objects.create(
        tenant=tenant,
        tool=cancel,
        url_template=f"{sandbox.url}/orders/objects/{{order_id}}/cancel",
        success_statuses=[201],
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
        {"fencing_token": 1, "outcome": "succeeded", "result": order},
    )
    console_user(django_user_model, tenant, "olga", "operator")
    console_user(django_user_model, tenant, "alice", "approver")

    sign_in(page, live_server.url, "olga")
    page.goto(f"{live_server.url}/ledger/runs/")
    page.click("text=run-1")
    page.click("text=compensation")
    assert order["id"] in page.locator("pre.input").nth(1).inner_text()
    shot(page, "compensation-preview")
    page.click("text=Request this compensation")
    assert "an approver decides it" in page.content()

    for approver in _page(browser, javascript=True):
        sign_in(approver, live_server.url, "alice")
        approver.goto(page.url)
        approver.fill("#reason", "the user cancelled the cart")
        shot(approver, "compensation-decide")
        approver.click("button[value=approve]")
        assert "a worker runs it" in approver.content()
        compensation = Compensation.objects.get()
        assert run_compensations([compensation.pk]) == ["succeeded"]
        approver.reload()
        shot(approver, "compensation-done")
        assert approver.locator("h1 .badge").inner_text() == "compensated"
        assert "Decided by alice" in approver.content()
        assert "the user cancelled the cart" in approver.content()
        assert approver.locator("text=Ask again").count() == 0  # nothing left to ask for
    stats = httpx.get(f"{sandbox.url}/orders/stats", timeout=5).json()
    assert stats["cancellations_per_object"] == {order["id"]: 1}
