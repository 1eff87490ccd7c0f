"""Real Chromium through Playwright against Django's live server; screenshots are kept in
test-artifacts/screenshots/ for every page a test visits, each checked with axe-core first."""

from __future__ import annotations

import os
import shutil
import weakref
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Page, sync_playwright

from ledger.models import Membership, Tenant
from ledger.services import metrics
from tests.api.conftest import ApiClient, client_for
from tests.browser import axe
from tests.console.conftest import make_pending

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


#: Pages opened with JavaScript off, which axe-core (a script) cannot check.
SCRIPTLESS: weakref.WeakSet[Page] = weakref.WeakSet()


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
    if not javascript:
        SCRIPTLESS.add(page)
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
    """Keeps the page as a screenshot, once axe-core has found nothing wrong with it (where
    the page runs scripts)."""
    assert page in SCRIPTLESS or axe.violations(page) == [], name
    page.screenshot(path=str(SHOTS / f"{name}.png"), full_page=True)


def console_user(django_user_model, tenant: Tenant, name: str, role: str = ""):
    user = django_user_model.objects.create_user(name, password=PASSWORD)
    Membership.objects.create(user=user, tenant=tenant, role=role)
    return user


def sign_in(page: Page, base_url: str, name: str, password: str = PASSWORD) -> None:
    page.goto(f"{base_url}/login/")
    page.fill("#id_username", name)
    page.fill("#id_password", password)
    page.click("button[type=submit]")
    page.wait_for_url(f"{base_url}/")


VERSIONS = {
    "model": "m-1",
    "prompt": "p-1",
    "rules": "r-1",
    "tool_schema": "t-1",
    "data_version": "d-1",
}


def _order(api: ApiClient, run_id: str, cart: str, *, outcome: str | None) -> dict:
    call = api.post(
        "/calls",
        {
            "run_id": run_id,
            "step_id": f"order-{cart}",
            "tool": "create_order",
            "input": {"cart": cart},
            "business_object_id": cart,
        },
    ).json()
    if outcome:
        api.post(f"/calls/{call['call_id']}/complete", {"fencing_token": 1, "outcome": outcome})
    return call


@pytest.fixture
def incident() -> tuple[Tenant, ApiClient, dict, dict]:
    """A bad combination in production: a run in flight under it, unknown orders, a pending
    approval, and metrics rolled up."""
    tenant = Tenant.objects.create(slug="acme", name="Acme")
    api = client_for(tenant)
    good = api.post("/combinations", {"label": "baseline", **VERSIONS}).json()
    bad = api.post("/combinations", {"label": "prompt-v2", **{**VERSIONS, "prompt": "p-2"}}).json()
    api.post(f"/combinations/{good['id']}/activate")
    api.start_run("run-before")  # the baseline's traffic, before the bad combination ships
    _order(api, "run-before", "c0", outcome="succeeded")
    api.post(f"/combinations/{bad['id']}/activate")
    api.start_run("run-checkout")
    for cart in ("c1", "c2", "c3"):
        _order(api, "run-checkout", cart, outcome="uncertain")
    _order(api, "run-checkout", "c4", outcome=None)  # executing when the rollback comes
    read = api.post(
        "/calls",
        {"run_id": "run-checkout", "step_id": "r", "tool": "read_file", "input": {"path": "x"}},
    ).json()
    api.post(
        f"/calls/{read['call_id']}/complete",
        {"fencing_token": 1, "outcome": "succeeded", "result": {"text": "x"}},
    )
    api.post(
        "/calls",
        {"run_id": "run-checkout", "step_id": "r", "tool": "read_file", "input": {"path": "x"}},
    )
    make_pending(tenant, "settings.py", run_id="run-review")
    metrics.roll_up()
    return tenant, api, good, bad
