"""A walk through the console as each demo role, in real Chromium at 1440 x 900: every link the
role is shown (top bar, inbox tiles, lists, detail pages) opens a page it may see, and every
page it reaches is kept as a screenshot. A page the role may not open is the console's own
403 page, naming the role needed and who holds it, in the user's language."""

from __future__ import annotations

import re
from urllib.parse import urlsplit

import pytest
from playwright.sync_api import Browser, Page, expect

from tests.browser.conftest import PASSWORD, SHOTS, console_user

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

#: The demo accounts (README "Two commands"): each has the role of its name.
DEMO_ROLES = ("operator", "approver", "manager", "admin")
#: Links that leave the console or end the session: not part of the walk.
OUTSIDE = re.compile(r"^/(admin|api|logout|login|i18n|static)(/|$)")
MAX_PAGES = 60


def _signed_in_page(browser: Browser, base_url: str, name: str) -> Page:
    context = browser.new_context(viewport={"width": 1440, "height": 900})
    page = context.new_page()
    page.goto(f"{base_url}/login/")
    page.fill("#id_username", name)
    page.fill("#id_password", PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_url(f"{base_url}/")
    return page


def _links(page: Page) -> list[tuple[str, bool]]:
    """Same-origin paths (with query) of the page's links, outside the console's exits, and
    whether each is a download (a CSV export)."""
    links = page.eval_on_selector_all(
        "a[href]", "els => els.map(e => [e.href, e.hasAttribute('download')])"
    )
    origin = urlsplit(page.url).netloc
    found = []
    for href, download in links:
        url = urlsplit(href)
        if url.netloc != origin or OUTSIDE.match(url.path):
            continue
        found.append((url.path + (f"?{url.query}" if url.query else ""), download))
    return found


def _walk(page: Page, base_url: str, role: str) -> dict[str, int]:
    """Visit every link reachable from the inbox (breadth first); the status of each. A
    download is fetched, not opened."""
    seen: dict[str, int] = {}
    queue = [("/", False)]
    while queue and len(seen) < MAX_PAGES:
        path, download = queue.pop(0)
        if path in seen:
            continue
        if download:
            seen[path] = page.request.get(f"{base_url}{path}").status
            continue
        response = page.goto(f"{base_url}{path}")
        assert response is not None
        seen[path] = response.status
        slug = re.sub(r"[^a-z0-9]+", "-", path.lower()).strip("-") or "inbox"
        page.screenshot(path=str(SHOTS / f"walk-{role}-{slug}.png"), full_page=True)
        queue.extend(link for link in _links(page) if link[0] not in seen)
    return seen


@pytest.mark.parametrize("role", DEMO_ROLES)
def test_every_link_a_role_sees_opens(
    browser: Browser, live_server, django_user_model, incident, role
):
    tenant = incident[0]
    console_user(django_user_model, tenant, role, role)
    page = _signed_in_page(browser, live_server.url, role)
    statuses = _walk(page, live_server.url, role)
    page.context.close()
    refused = {path: status for path, status in statuses.items() if status >= 400}
    assert refused == {}, f"{role} was shown links it cannot open"
    assert len(statuses) >= 5, statuses  # the walk got past the inbox


def test_a_refusal_names_the_role_and_who_holds_it(
    browser: Browser, live_server, django_user_model, incident
):
    tenant = incident[0]
    console_user(django_user_model, tenant, "olga", "operator")
    console_user(django_user_model, tenant, "alice", "approver")
    console_user(django_user_model, tenant, "root", "admin")
    page = _signed_in_page(browser, live_server.url, "olga")
    response = page.goto(f"{live_server.url}/approvals/")
    assert response is not None and response.status == 403
    expect(page.locator("h1")).to_have_text("Your role does not allow this page")
    expect(page.locator("main")).to_contain_text("This page is open to: approver (and admin).")
    expect(page.locator("main li")).to_have_text(["alice", "root"])
    expect(page.locator("nav[aria-label]")).to_be_visible()  # the console's own layout
    page.screenshot(path=str(SHOTS / "refusal-en.png"), full_page=True)
    page.goto(f"{live_server.url}/")
    page.select_option("#language-switch", "zh-hans")
    page.click("#language-switch + button")
    response = page.goto(f"{live_server.url}/approvals/")
    assert response is not None and response.status == 403
    expect(page.locator("h1")).not_to_have_text("Your role does not allow this page")
    expect(page.locator("main")).to_contain_text("审批人")
    page.screenshot(path=str(SHOTS / "refusal-zh-hans.png"), full_page=True)
    page.context.close()
