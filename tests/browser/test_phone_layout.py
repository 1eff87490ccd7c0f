"""The on-call pages at a phone's width (390 x 844), in English and 简体中文: the inbox, the
queue of unknown calls (a card per call, its next step on it), an unknown call's page with its
resolve buttons within the first screen, and the approvals queue; no page is wider than the
phone, and its top bar is two lines (screenshots in test-artifacts/screenshots/phone-*.png)."""

from __future__ import annotations

import pytest
from playwright.sync_api import Page, expect

from console.models import Preferences
from tests.browser.conftest import console_user, shot, sign_in
from tests.console.conftest import make_pending

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]
PHONE = {"width": 390, "height": 844}


def _fits(page: Page) -> None:
    wider = page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
    assert wider <= 1, f"{page.url} is {wider}px wider than the phone"


@pytest.mark.parametrize("language", ["en", "zh-hans"])
def test_the_on_call_pages_fit_a_phone_with_their_actions_on_the_first_screen(
    live_server, page: Page, django_user_model, tenant, language: str
) -> None:
    pending = make_pending(tenant, "config/app-2.yaml")
    make_pending(tenant, "config/app-3.yaml", run_id="run-2")
    for name, role in (("olga", "operator"), ("ann", "approver")):
        user = console_user(django_user_model, tenant, name, role)
        Preferences.objects.create(user=user, language=language)
    page.set_viewport_size(PHONE)
    sign_in(page, live_server.url, "olga")
    for path, name in (("/", "inbox"), ("/unknown/", "unknown")):
        page.goto(f"{live_server.url}{path}")
        _fits(page)
        # The top bar is two lines: its links on one beside the name, who is signed in below.
        bar = page.locator("header.topbar").bounding_box()
        assert bar is not None and bar["height"] < 100, bar
        shot(page, f"phone-{name}-{language}")
    # A card per call: its file and its next step are on the phone's screen, not off to the side.
    card = page.locator("table.stack tbody tr").first
    expect(card.locator("td.status")).to_be_visible()
    assert card.locator("td.status").bounding_box()["x"] < PHONE["width"]
    # ... and read in full, not cut with an ellipsis.
    step = card.locator(".next-step .clip")
    assert step.evaluate("e => e.scrollWidth <= e.clientWidth + 1"), step.inner_text()
    page.goto(f"{live_server.url}/unknown/{pending.record_id}/")
    _fits(page)
    shot(page, f"phone-unknown-call-{language}")
    buttons = page.locator("#unknown-resolve button")
    assert buttons.count() >= 3
    for index in range(buttons.count()):
        box = buttons.nth(index).bounding_box()
        assert box is not None and box["y"] + box["height"] <= PHONE["height"], box
    page.context.clear_cookies()
    sign_in(page, live_server.url, "ann")
    page.goto(f"{live_server.url}/approvals/")
    _fits(page)
    shot(page, f"phone-approvals-{language}")
