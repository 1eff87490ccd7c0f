"""The queues in real Chromium at 1440 x 900: a bulk action's error on the unknown queue is in
view, focused and announced, with what was typed kept; the approvals queue counts each
expiry down and brings new approvals without a reload; the keyboard hint lists only the
shortcuts a page has."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db.models.functions import Now
from playwright.sync_api import Browser, Page, expect

from ledger.models import ApprovalRequest
from tests.browser.conftest import SHOTS, console_user, sign_in
from tests.console.conftest import make_pending

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def _page(browser: Browser, base_url: str, name: str, *, javascript: bool = True) -> Page:
    context = browser.new_context(
        viewport={"width": 1440, "height": 900}, java_script_enabled=javascript
    )
    page = context.new_page()
    sign_in(page, base_url, name)
    return page


#: Where an element is in the window, and whether it has the focus.
PLACE = """(selector) => {
  const element = document.querySelector(selector);
  const box = element.getBoundingClientRect();
  return {top: box.top, bottom: box.bottom, focused: document.activeElement === element};
}"""


@pytest.mark.parametrize(
    ("tick", "action", "error"),
    [
        (False, "lookup", "Select at least one call."),
        (True, "failed", "This action needs a reason"),
    ],
)
def test_a_bulk_actions_error_is_in_view_focused_and_announced(
    browser: Browser, live_server, django_user_model, incident, tick, action, error
):
    tenant, *_ = incident
    console_user(django_user_model, tenant, "olga", "operator")
    page = _page(browser, live_server.url, "olga")
    page.goto(f"{live_server.url}/unknown/")
    if tick:
        page.locator("#unknown-list tbody input[type=checkbox]").nth(1).check()
    page.select_option("#bulk-action", action)
    if action == "lookup":
        page.fill("#bulk-note", "the customer called")
    page.click("#bulk button[type=submit]")
    alert = page.locator("#bulk-error")
    expect(alert).to_contain_text(error)
    expect(alert).to_have_attribute("role", "alert")
    place = page.evaluate(PLACE, "#bulk-error")
    assert place["focused"], "the error does not have the focus"
    assert place["top"] >= 0 and place["bottom"] <= 900, f"the error is out of view: {place}"
    # What was chosen, typed and ticked is still there.
    expect(page.locator("#bulk-action")).to_have_value(action)
    if action == "lookup":
        expect(page.locator("#bulk-note")).to_have_value("the customer called")
    if tick:
        expect(page.locator("#unknown-list tbody input[type=checkbox]").nth(1)).to_be_checked()
    page.screenshot(path=str(SHOTS / f"unknown-bulk-error-{action}.png"))
    page.context.close()


def test_an_approvals_expiry_counts_down_each_minute(
    browser: Browser, live_server, django_user_model, tenant
):
    approval = make_pending(tenant)
    ApprovalRequest.objects.filter(pk=approval.pk).update(
        expires_at=Now() + timedelta(hours=2, minutes=30, seconds=30)
    )
    console_user(django_user_model, tenant, "ann", "approver")
    page = _page(browser, live_server.url, "ann")
    page.clock.install()
    page.goto(f"{live_server.url}/approvals/")
    countdown = page.locator("table.list tbody time[data-expires-in]")
    expect(countdown).to_have_text("2 h 30 min")
    # The queue's own refresh brings the server's values, by the server's (real) clock: the
    # browser's counting alone is what this test follows.
    page.route("**/approvals/**", lambda route: route.abort())
    page.clock.run_for("01:00")
    expect(countdown).to_have_text("2 h 29 min")
    page.clock.run_for("02:29:00")
    expect(countdown).to_have_text("under a minute")
    page.clock.run_for("01:00")
    expect(countdown).to_have_text("expired")
    page.context.close()


def test_without_javascript_the_countdown_is_the_servers(
    browser: Browser, live_server, django_user_model, tenant
):
    approval = make_pending(tenant)
    ApprovalRequest.objects.filter(pk=approval.pk).update(
        expires_at=Now() + timedelta(minutes=45, seconds=30)
    )
    console_user(django_user_model, tenant, "ann", "approver")
    page = _page(browser, live_server.url, "ann", javascript=False)
    page.goto(f"{live_server.url}/approvals/")
    expect(page.locator("table.list tbody time")).to_have_text("45 min")
    page.context.close()


def test_a_new_approval_appears_in_the_queue_without_a_reload(
    browser: Browser, live_server, django_user_model, tenant
):
    make_pending(tenant, "first.py", "run-1")
    console_user(django_user_model, tenant, "ann", "approver")
    page = _page(browser, live_server.url, "ann")
    page.clock.install()  # Playwright's clock: moved past the queue's next poll, not waited for
    page.goto(f"{live_server.url}/approvals/")
    rows = page.locator("#approval-list tbody tr")
    expect(rows).to_have_count(1)
    make_pending(tenant, "second.py", "run-2")
    page.clock.run_for("00:31")
    expect(rows).to_have_count(2)
    page.context.close()


@pytest.mark.parametrize(
    ("role", "path", "shown", "not_shown"),
    [
        ("operator", "/unknown/", ["x tick", "/ filter"], ["a approve", "r reject"]),
        ("manager", "/combinations/", [], ["a approve", "r reject", "x tick"]),
        ("operator", "/ledger/", ["j / k", "/ filter"], ["a approve", "x tick"]),
        ("approver", "/approvals/N/", ["a approve", "r reject"], ["x tick"]),
    ],
)
def test_the_keyboard_hint_lists_only_the_shortcuts_the_page_has(
    browser: Browser, live_server, django_user_model, incident, role, path, shown, not_shown
):
    tenant, *_ = incident
    console_user(django_user_model, tenant, role, role)
    page = _page(browser, live_server.url, role)
    approval = ApprovalRequest.objects.filter(tenant=tenant).first()
    assert approval is not None
    page.goto(f"{live_server.url}{path.replace('N', str(approval.pk))}")
    hint = page.locator("#key-hint")
    expect(hint).to_be_visible()
    read = hint.inner_text()  # what is shown, not the hidden shortcuts
    assert all(text in read for text in [*shown, "? all keys"]), read
    assert not any(text in read for text in not_shown), read
    page.context.close()
