"""Real Chromium through Playwright against Django's live server; screenshots are kept in
test-artifacts/screenshots/ for every page a test visits."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Page, sync_playwright

from console.models import Membership
from ledger.models import Tenant

ROOT = Path(__file__).resolve().parents[2]
SHOTS = ROOT / "test-artifacts" / "screenshots"
CHROMIUM = os.environ.get("CHROMIUM", shutil.which("chromium") or "/usr/bin/chromium")
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
PASSWORD = "pw-browser-123456"


# Module scope: Playwright's sync API keeps an event loop running while it is open, which
# would break the asyncio tests that run after the browser tests.
@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    if not Path(CHROMIUM).exists():
        pytest.fail(
            f"Chromium is needed for the browser tests: apt-get install chromium "
            f"(looked for {CHROMIUM})"
        )
    SHOTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        yield chromium
        chromium.close()


# Reports every Content-Security-Policy violation of every page, before any of its own code.
REPORT_VIOLATIONS = """
document.addEventListener("securitypolicyviolation", (e) => {
  window.reportCspViolation(
    `${e.violatedDirective} ${e.blockedURI} ${e.sourceFile}:${e.lineNumber}`
  );
});
"""


def _page(browser: Browser, *, javascript: bool) -> Iterator[Page]:
    """A page that fails its test if the console breaks its own Content-Security-Policy:
    Chromium reports a violation on the console and (with JavaScript on) as an event."""
    context = browser.new_context(
        viewport={"width": 1280, "height": 860}, java_script_enabled=javascript
    )
    violations: list[str] = []
    if javascript:
        context.expose_function("reportCspViolation", lambda text: violations.append(text))
        context.add_init_script(REPORT_VIOLATIONS)
    page = context.new_page()
    page.on(
        "console",
        lambda message: (
            violations.append(message.text) if "Content Security Policy" in message.text else None
        ),
    )
    yield page
    context.close()
    assert violations == [], f"Content-Security-Policy violations: {violations}"


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    yield from _page(browser, javascript=True)


@pytest.fixture
def page_without_js(browser: Browser) -> Iterator[Page]:
    yield from _page(browser, javascript=False)


def shot(page: Page, name: str) -> None:
    page.screenshot(path=str(SHOTS / f"{name}.png"), full_page=True)


def console_user(django_user_model, tenant: Tenant, name: str, role: str = ""):
    user = django_user_model.objects.create_user(name, password=PASSWORD)
    Membership.objects.create(user=user, tenant=tenant, role=role)
    return user


def sign_in(page: Page, base_url: str, name: str) -> None:
    page.goto(f"{base_url}/login/")
    page.fill("#id_username", name)
    page.fill("#id_password", PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_url(f"{base_url}/")
