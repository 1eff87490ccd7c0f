"""The pages of the authority model in a real browser: an admin's API tokens (revoking one), a
manager's approval policies (adding one), the Tools page's key fields, and the approval a
policy asked for, with the exact call; in English and Chinese, at a desktop's width and a
phone's, none wider than its window."""

from __future__ import annotations

import pytest
from playwright.sync_api import Page

from ledger.models import ApiToken, ApprovalRequest, Tenant
from ledger.services import approval_policies
from tests.api.conftest import client_for
from tests.browser.conftest import console_user, shot, sign_in

pytestmark = pytest.mark.django_db(transaction=True)


def _no_overflow(page: Page) -> None:
    wider = page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
    assert wider <= 1, f"{page.url} is {wider}px wider than the window"


def _policy_asked(tenant: Tenant) -> ApprovalRequest:
    approval_policies.add_policy(
        tenant=tenant,
        actor="mia",
        source="api",
        name="large orders",
        reason="orders over 100 need a second look",
        tool="create_order",
        path="amount",
        operator="gt",
        value=100,
    )
    api = client_for(tenant)
    api.start_run()
    asked = api.call("create_order", {"amount": 500, "cart": "c-42"}).json()
    return ApprovalRequest.objects.get(pk=asked["approval_id"])


@pytest.mark.parametrize("language", ["en", "zh-hans"])
def test_an_admin_revokes_a_token_and_a_manager_adds_a_policy(
    live_server, page: Page, django_user_model, language: str
) -> None:
    tenant = Tenant.objects.create(slug="acme", name="Acme")
    console_user(django_user_model, tenant, "ada", "admin")
    ApiToken.issue(tenant=tenant, name="ci-runtime")
    page.context.set_extra_http_headers({"Accept-Language": language})
    sign_in(page, live_server.url, "ada")
    page.goto(f"{live_server.url}/tokens/")
    assert page.locator("td", has_text="ci-runtime").count() >= 1
    shot(page, f"authority-tokens-{language}")
    page.fill("input[name=reason]", "rotated")
    page.click("form[action='/tokens/revoke'] button[type=submit]")
    page.wait_for_url(f"{live_server.url}/tokens/")
    assert ApiToken.objects.get().revoked_at is not None
    shot(page, f"authority-tokens-revoked-{language}")
    page.goto(f"{live_server.url}/policies/")
    page.fill("#name", "large orders")
    page.fill("#tool", "create_order")
    page.fill("#path", "amount")
    page.select_option("#operator", "gt")
    page.fill("#value", "100")
    page.fill("#reason", "orders over 100 need a second look")
    page.click("form.filters button[type=submit]")
    page.wait_for_url(f"{live_server.url}/policies/")
    assert page.locator("code", has_text="amount gt 100").count() == 1
    shot(page, f"authority-policies-{language}")
    page.goto(f"{live_server.url}/tools/")
    _no_overflow(page)
    shot(page, f"authority-tools-{language}")


@pytest.mark.parametrize(("width", "height"), [(1440, 900), (390, 844)])
def test_the_approval_a_policy_asked_for_shows_the_exact_call_and_why(
    live_server, page: Page, django_user_model, width: int, height: int
) -> None:
    tenant = Tenant.objects.create(slug="acme", name="Acme")
    console_user(django_user_model, tenant, "bob", "approver")
    approval = _policy_asked(tenant)
    page.set_viewport_size({"width": width, "height": height})
    sign_in(page, live_server.url, "bob")
    page.goto(f"{live_server.url}/approvals/{approval.pk}/")
    text = page.locator("main").inner_text()
    assert "orders over 100 need a second look" in text and '"amount": 500' in text
    shot(page, f"authority-policy-approval-{width}")
