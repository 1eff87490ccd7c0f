"""Compensation from the console alone, in real Chromium: a manager sets it up on the Tools
page (a refused URL shown beside its field first), an operator asks for it with a reason, an
approver reads that reason and that a worker sends it, approves, and the sandbox's order is
cancelled once. In English and Chinese, at a desktop's width and a phone's."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from playwright.sync_api import Browser, Page

from ledger.models import ApprovalRequest, Compensation, IdempotencyRecord, Tenant
from reconcile.tasks import run_compensations
from sandbox.server import SandboxServer
from tests.api.conftest import client_for
from tests.browser.conftest import _page, console_user, shot, sign_in
from tests.factories import make_tool

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

SIZES = {"1440": {"width": 1440, "height": 900}, "390": {"width": 390, "height": 844}}


def _fits(page: Page, selector: str) -> None:
    """``selector`` is no wider than the window (the page's own tables may scroll)."""
    right = page.evaluate(f"document.querySelector('{selector}').getBoundingClientRect().right")
    assert right <= page.viewport_size["width"] + 1, f"{selector} ends at {right}px"


def _order(tenant: Tenant, sandbox: SandboxServer) -> tuple[IdempotencyRecord, dict]:
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


# In English in `make test`, in Chinese too in `make drill` (docs/testing.md).
@pytest.mark.parametrize("language", ["en", pytest.param("zh-hans", marks=pytest.mark.scale)])
def test_a_manager_sets_up_a_compensation_that_an_operator_and_an_approver_run(
    page: Page,
    browser: Browser,
    live_server: Any,
    django_user_model: Any,
    sandbox: SandboxServer,
    settings: Any,
    language: str,
) -> None:
    settings.LEDGER_OUTBOUND_ALLOW_PRIVATE = True  # the sandbox listens on 127.0.0.1
    tenant = Tenant.objects.create(slug="acme", name="Acme")
    make_tool(tenant, "create_order")
    make_tool(tenant, "cancel_order")
    for name, role in (("mia", "manager"), ("olga", "operator"), ("alice", "approver")):
        console_user(django_user_model, tenant, name, role)
    record, order = _order(tenant, sandbox)
    page.context.set_extra_http_headers({"Accept-Language": language})

    # Before: nothing to compensate, and the run says why once, linking the Tools page.
    sign_in(page, live_server.url, "mia")
    page.set_viewport_size(SIZES["1440"])
    page.goto(f"{live_server.url}/ledger/runs/{record.run_id}/")
    assert page.locator("a[href^='/compensations/']").count() == 0
    page.click("main a[href='/tools/#compensations']")

    # A URL that takes an argument the mapping does not give: refused beside its field.
    assert page.input_value("#comp-tool") == ""  # a new set-up names its tools
    page.select_option("#comp-tool", "create_order")
    page.select_option("#comp-compensating_tool", "cancel_order")
    page.fill("#comp-arguments", "order_id = result.id")
    page.fill("#comp-url_template", f"{sandbox.url}/orders/objects/{{order}}/cancel")
    page.fill("#comp-lookup_url_template", f"{sandbox.url}/orders/cancellations/by-key/{{key}}")
    page.click("#compensation-form button[type=submit]")
    error = page.locator("#comp-url_template-error")
    assert "order" in error.inner_text()
    assert not Compensation.objects.exists()
    error.scroll_into_view_if_needed()
    shot(page, f"compensation-setup-refused-{language}-1440")

    page.fill("#comp-url_template", f"{sandbox.url}/orders/objects/{{order_id}}/cancel")
    page.click("#compensation-form button[type=submit]")
    page.wait_for_url(f"{live_server.url}/tools/#compensations")
    row = page.locator("#compensations tbody tr", has_text="cancel_order")
    assert "order_id = result.id" in row.inner_text()
    shot(page, f"compensation-setup-saved-{language}-1440")
    page.set_viewport_size(SIZES["390"])
    page.goto(f"{live_server.url}/tools/?compensation=create_order#compensation-form")
    assert page.input_value("#comp-url_template").endswith("/orders/objects/{order_id}/cancel")
    _fits(page, "#compensation-form")
    shot(page, f"compensation-setup-edit-{language}-390")

    for width, size in SIZES.items():
        for operator in _page(browser, javascript=True):
            operator.context.set_extra_http_headers({"Accept-Language": language})
            operator.set_viewport_size(size)
            sign_in(operator, live_server.url, "olga")
            operator.goto(f"{live_server.url}/ledger/runs/{record.run_id}/")
            operator.click(f"a[href='/compensations/records/{record.pk}/']")
            if width == "1440":
                operator.fill("#request-reason", "the customer cancelled the cart")
                operator.click("form[action$='/request'] button[type=submit]")
            assert operator.locator("#compensation-state").count() == 1
            _fits(operator, "main")
            shot(operator, f"compensation-requested-{language}-{width}")

    approval = ApprovalRequest.objects.get(record__key=f"{record.key}:compensate")
    for width, size in SIZES.items():
        for approver in _page(browser, javascript=True):
            approver.context.set_extra_http_headers({"Accept-Language": language})
            approver.set_viewport_size(size)
            sign_in(approver, live_server.url, "alice")
            approver.goto(f"{live_server.url}/approvals/{approval.pk}/")
            text = approver.locator("main").inner_text()
            assert "the customer cancelled the cart" in text
            if language == "en":
                assert "a worker sends" in text and "the model reads it" not in text
            _fits(approver, "main")
            shot(approver, f"compensation-approval-{language}-{width}")
            if width == "390":
                approver.fill("#reason", "the customer asked")
                approver.click("button[value=approve]")
                approver.wait_for_url(f"{live_server.url}/approvals/")

    compensation = Compensation.objects.get()
    assert run_compensations([compensation.pk]) == ["succeeded"]
    page.goto(f"{live_server.url}/ledger/records/{record.pk}/")
    stats = httpx.get(f"{sandbox.url}/orders/stats", timeout=5).json()
    assert stats["cancellations_per_object"] == {order["id"]: 1}
