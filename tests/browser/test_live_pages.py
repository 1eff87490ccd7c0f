"""The object pages in real Chromium: a call's page shows its action settled in the background
without a reload, an unknown call's page and an approval's page drop a form whose action was
done meanwhile elsewhere (showing back what was typed in it), and the pages of one object at
1440 x 900 in English and 简体中文 (screenshots in test-artifacts/screenshots/object-*.png)."""

from __future__ import annotations

from typing import Any

import pytest
from playwright.sync_api import Page, expect

from ledger.models import IdempotencyRecord, LedgerEntry, Run
from ledger.records import Outcome, resolve_unknown
from tests.api.conftest import client_for
from tests.browser.conftest import console_user, shot, sign_in
from tests.console.conftest import make_pending

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

#: A live page polls every 10 s. The browser's clock is Playwright's: the test moves it past
#: the next poll instead of waiting for it; the poll itself is a real request.
NEXT_POLL = "00:11"


def _uncertain_order(api: Any, cart: str, run_id: str = "run-live") -> dict[str, Any]:
    order = api.call(
        "create_order", {"cart": cart}, run_id=run_id, step_id=cart, business_object_id=cart
    ).json()
    api.post(f"/calls/{order['call_id']}/complete", {"fencing_token": 1, "outcome": "uncertain"})
    return order


def _settle(order: dict[str, Any], order_id: str) -> None:
    """What a worker's look-up does when the order is found downstream."""
    resolve_unknown(
        record=IdempotencyRecord.objects.get(key=order["idempotency_key"]),
        outcome=Outcome.SUCCEEDED,
        actor="worker",
        detail="found downstream",
        result={"order_id": order_id},
    )


def test_a_call_page_shows_its_action_settled_without_a_reload(
    page: Page, live_server, django_user_model, tenant
) -> None:
    api = client_for(tenant)
    api.start_run("run-live")
    order = _uncertain_order(api, "cart-live")
    entry = LedgerEntry.objects.get(call_id=order["call_id"])
    console_user(django_user_model, tenant, "olga", "operator")
    sign_in(page, live_server.url, "olga")
    page.clock.install()
    page.goto(f"{live_server.url}/ledger/calls/{entry.pk}/")
    expect(page.locator("#call-record")).to_contain_text("unknown")
    page.evaluate("window.notReloaded = true")
    _settle(order, "o-settled-77")
    page.clock.run_for(NEXT_POLL)
    expect(page.locator("#call-record")).to_contain_text("o-settled-77")
    expect(page.locator("#call-head .badge")).to_have_text("succeeded")
    expect(page.locator("#call-retry")).to_contain_text("o-settled-77")
    expect(page.locator("#call-activity")).to_contain_text("record.resolved_succeeded")
    # What the model was told when the call reported stays as it was told.
    expect(page.locator("#call-told")).to_contain_text("SIDE_EFFECT_UNCERTAIN")
    assert page.evaluate("window.notReloaded") is True


def test_an_unknown_calls_page_keeps_what_the_operator_is_typing(
    page: Page, live_server, django_user_model, tenant
) -> None:
    api = client_for(tenant)
    api.start_run("run-live")
    typing, idle = _uncertain_order(api, "cart-typing"), _uncertain_order(api, "cart-idle")
    records = {
        name: IdempotencyRecord.objects.get(key=order["idempotency_key"]).pk
        for name, order in (("typing", typing), ("idle", idle))
    }
    console_user(django_user_model, tenant, "olga", "operator")
    sign_in(page, live_server.url, "olga")
    page.clock.install()
    page.goto(f"{live_server.url}/unknown/{records['typing']}/")
    page.fill("#note", "Support saw the order in the vendor's portal")
    page.locator("h1").click()  # away from the field: what was typed is still the user's
    _settle(typing, "o-typing")
    page.clock.run_for(NEXT_POLL)
    expect(page.locator("#unknown-head .badge")).to_have_text("succeeded")
    expect(page.locator("#unknown-timeline")).to_contain_text("record.resolved_succeeded")
    # Settled meanwhile: the form it can no longer use gives way, what was typed is shown back.
    expect(page.locator("#unknown-resolve")).to_contain_text("nothing is left to resolve")
    expect(page.locator("#note")).to_have_count(0)
    expect(page.locator("#unknown-resolve .kept")).to_contain_text(
        "Support saw the order in the vendor's portal"
    )
    # Untouched, the form gives way to the settled state.
    page.goto(f"{live_server.url}/unknown/{records['idle']}/")
    expect(page.locator("#note")).to_be_visible()
    _settle(idle, "o-idle")
    page.clock.run_for(NEXT_POLL)
    expect(page.locator("#unknown-resolve")).to_contain_text("nothing is left to resolve")
    expect(page.locator("#note")).to_have_count(0)


def test_a_stale_approval_tab_stops_offering_a_decision_made_elsewhere(
    page: Page, live_server, django_user_model, tenant
) -> None:
    from ledger.services.approvals import decide

    approval = make_pending(tenant)
    console_user(django_user_model, tenant, "ann", "approver")
    other = console_user(django_user_model, tenant, "ben", "approver")
    sign_in(page, live_server.url, "ann")
    page.clock.install()
    page.goto(f"{live_server.url}/approvals/{approval.pk}/")
    page.fill("#reason", "looks right to me")
    page.locator("h1").click()
    decide(approval=approval, user=other, approve=False, reason="the file moved")
    page.clock.run_for(NEXT_POLL)
    expect(page.locator("#approval-head .badge")).to_have_text("rejected")
    expect(page.locator("button[value=approve]")).to_have_count(0)
    expect(page.locator("#approval-decide .kept")).to_contain_text("looks right to me")


def test_the_pages_of_one_object_at_desktop_width(
    page: Page, live_server, django_user_model, tenant
) -> None:
    """Screenshots of the pages of a call (a first call, a dedup hit, an uncertain call later
    settled), an action, a run, an unknown call and an approval, in English and 简体中文."""
    api = client_for(tenant)
    api.start_run("run-4c1e9b27-support-session")
    run_id = "run-4c1e9b27-support-session"
    cart = "cart-42-" + "line-item-" * 8
    first = api.call(
        "create_order",
        {"cart": cart, "email": "ada@example.com"},
        run_id=run_id,
        step_id="order",
        business_object_id=cart,
    ).json()
    api.post(
        f"/calls/{first['call_id']}/complete",
        {"fencing_token": 1, "outcome": "succeeded", "result": {"order_id": "o-42"}},
    )
    hit = api.call(
        "create_order",
        {"cart": cart, "email": "ada@example.com"},
        run_id=run_id,
        step_id="order",
        business_object_id=cart,
    ).json()
    settled = _uncertain_order(api, "cart-7", run_id=run_id)
    _settle(settled, "o-7")
    unknown = _uncertain_order(api, "cart-8", run_id=run_id)
    approval = make_pending(tenant, path="src/checkout.py", run_id="run-review")
    calls = {
        name: LedgerEntry.objects.get(call_id=call["call_id"]).pk
        for name, call in (("first", first), ("dedup-hit", hit), ("settled", settled))
    }
    record = IdempotencyRecord.objects.get(key=first["idempotency_key"])
    unknown_record = IdempotencyRecord.objects.get(key=unknown["idempotency_key"])
    pages = {
        **{f"call-{name}": f"/ledger/calls/{pk}/" for name, pk in calls.items()},
        "record": f"/ledger/records/{record.pk}/",
        "run": f"/ledger/runs/{Run.objects.get(run_id=run_id).pk}/",
        "unknown": f"/unknown/{unknown_record.pk}/",
        "approval": f"/approvals/{approval.pk}/",
    }
    console_user(django_user_model, tenant, "root", "admin")
    page.set_viewport_size({"width": 1440, "height": 900})
    sign_in(page, live_server.url, "root")
    for language in ("en", "zh-hans"):
        if language != "en":
            page.select_option("#language-switch", language)
            page.click("#language-switch + button")
        for name, path in pages.items():
            response = page.goto(f"{live_server.url}{path}")
            assert response is not None and response.status == 200, path
            shot(page, f"object-{name}-{language}")
            assert page.locator("h1").count() == 1, path
            assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth"), path
