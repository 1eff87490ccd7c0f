"""The console runs under its Content-Security-Policy in Chromium, and a violation is caught."""

from __future__ import annotations

import pytest
from playwright.sync_api import Browser

from tests.browser.conftest import _page

pytestmark = pytest.mark.django_db(transaction=True)


def test_an_inline_script_is_refused_and_the_violation_fails_the_test(
    browser: Browser, live_server
) -> None:
    pages = _page(browser, javascript=True)
    page = next(pages)
    response = page.goto(f"{live_server.url}/login/")
    assert (
        response is not None and "script-src 'self'" in response.headers["content-security-policy"]
    )
    page.evaluate(
        """() => {
            const script = document.createElement("script");
            script.textContent = "window.injected = true";
            document.head.appendChild(script);
        }"""
    )
    page.wait_for_timeout(200)  # the violation event is dispatched asynchronously
    assert page.evaluate("window.injected") is None  # refused
    with pytest.raises(AssertionError, match="script-src"):
        next(pages, None)


@pytest.mark.parametrize("path", ["/admin/", "/admin/ledger/tenant/add/", "/api/v1/docs"])
def test_the_admin_and_the_api_docs_work_under_the_policy(
    browser: Browser, live_server, django_user_model, path: str
) -> None:
    django_user_model.objects.create_superuser("root", "root@example.com", "pw-browser-123456")
    pages = _page(browser, javascript=True)
    page = next(pages)
    page.goto(f"{live_server.url}/admin/login/")
    page.fill("#id_username", "root")
    page.fill("#id_password", "pw-browser-123456")
    page.click("input[type=submit]")
    page.wait_for_url(f"{live_server.url}/admin/")
    page.goto(f"{live_server.url}{path}")
    page.wait_for_load_state("networkidle")
    if path == "/api/v1/docs":  # Swagger UI's own script ran and drew its frame
        page.wait_for_selector("#swagger-ui .swagger-ui")
    next(pages, None)  # closes the page, failing on any violation
