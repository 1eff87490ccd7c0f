"""Rows are ticked from the keyboard: j / k select a row of the unknown queue, x ticks or
unticks its checkbox for a bulk action, / goes to the queue's filters."""

from __future__ import annotations

import pytest
from playwright.sync_api import Page, expect

from tests.browser.conftest import console_user, sign_in

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def test_x_ticks_the_selected_row(page: Page, live_server, django_user_model, incident):
    tenant, *_ = incident
    console_user(django_user_model, tenant, "olga", "operator")
    sign_in(page, live_server.url, "olga")
    page.goto(f"{live_server.url}/unknown/")
    boxes = page.locator("#unknown-list tbody input[type=checkbox]")
    page.locator("body").click()
    page.keyboard.press("j")
    page.keyboard.press("j")
    page.keyboard.press("x")
    expect(boxes.nth(1)).to_be_checked()
    expect(boxes.nth(0)).not_to_be_checked()
    page.keyboard.press("x")
    expect(boxes.nth(1)).not_to_be_checked()
    page.keyboard.press("/")
    expect(page.locator("#id_tool")).to_be_focused()  # the queue's filters, not the bulk form
