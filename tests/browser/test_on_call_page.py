"""The On call page in real Chromium: with JavaScript a form swaps the settings in place
(HTMX), without it the same forms post and redirect."""

from __future__ import annotations

import pytest
from playwright.sync_api import Page

from ledger.models import NotificationChannel, OnCallPolicy, Tenant
from tests.browser.conftest import console_user, shot, sign_in

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]
HOOK = "https://hooks.example.com/services/T0/B0/s3cr3t-token"


@pytest.fixture
def tenant(settings) -> Tenant:
    settings.LEDGER_OUTBOUND_ALLOWED_HOSTS = ["hooks.example.com"]
    settings.LEDGER_OUTBOUND_ALLOW_PRIVATE = True  # hooks.example.com does not resolve here
    return Tenant.objects.create(slug="acme", name="Acme")


def add_slack_channel(page: Page) -> None:
    page.select_option("#role", "operator")
    page.select_option("#tier", "2")
    page.select_option("#kind", "slack")
    page.fill("#target", HOOK)
    page.click("form:has(#target) button[type=submit]")


def test_a_manager_adds_a_channel_in_place(
    page: Page, live_server, django_user_model, tenant
) -> None:
    console_user(django_user_model, tenant, "mia", "manager")
    sign_in(page, live_server.url, "mia")
    page.goto(f"{live_server.url}/on-call/")
    page.evaluate("window.notReloaded = true")
    add_slack_channel(page)
    page.wait_for_selector("#on-call td code")
    assert page.evaluate("window.notReloaded") is True  # swapped in place, no new page
    assert "https://hooks.example.com/…" in page.inner_text("#on-call")
    assert "s3cr3t" not in page.content()
    shot(page, "on-call-channel-added")
    channel = NotificationChannel.objects.get()
    assert (channel.role, channel.tier, channel.kind, channel.target) == (
        "operator",
        2,
        "slack",
        HOOK,
    )


def test_the_page_works_without_javascript(
    page_without_js: Page, live_server, django_user_model, tenant
) -> None:
    console_user(django_user_model, tenant, "nojs", "manager")
    page = page_without_js
    sign_in(page, live_server.url, "nojs")
    page.goto(f"{live_server.url}/on-call/")
    add_slack_channel(page)
    page.wait_for_url(f"{live_server.url}/on-call/")
    assert "Channel added." in page.inner_text("body")
    page.fill("#first_sla_minutes", "10")
    page.fill("#second_sla_minutes", "40")
    page.click("form:has(#first_sla_minutes) button[type=submit]")
    page.wait_for_url(f"{live_server.url}/on-call/")
    assert (OnCallPolicy.objects.get().first_sla_minutes, NotificationChannel.objects.count()) == (
        10,
        1,
    )
    page.click("#on-call td form button[type=submit]")
    page.wait_for_url(f"{live_server.url}/on-call/")
    assert not NotificationChannel.objects.exists()
