"""A walk through the console as each demo role, in real Chromium at 1440 x 900: every link the
role is shown (top bar, inbox tiles, lists, detail pages) opens a page it may see, the top bar
stays on one line, axe-core finds no accessibility violation on any page it reaches, and every
page is kept as a screenshot. A page the role may not
open is the console's own 403 page, naming the role needed and who holds it, in the user's
language."""

from __future__ import annotations

import re
from urllib.parse import urlsplit

import pytest
from playwright.sync_api import Browser, Page, expect

from tests.browser import axe
from tests.browser.conftest import SHOTS, console_user, sign_in

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

#: The demo accounts (README "Two commands"): each has the role of its name.
DEMO_ROLES = ("operator", "approver", "manager", "admin")
#: Links that leave the console or end the session: not part of the walk.
OUTSIDE = re.compile(r"^/(admin|api|logout|login|i18n|static)(/|$)")
MAX_PAGES = 80
#: Pages of the same shape (the same path but for its ids, the same query parameters) are
#: visited this many times: every kind of page is reached, without walking every row.
PER_SHAPE = 2
#: The pages of one object each role's walk reaches (from its lists, links and audit log).
OBJECT_PAGES = {
    "operator": {"/ledger/records/N/", "/ledger/calls/N/", "/ledger/runs/N/", "/audit/N/"},
    "approver": {"/ledger/records/N/", "/approvals/N/", "/audit/N/"},
    "manager": {"/ledger/records/N/", "/combinations/N/", "/audit/N/"},
    "admin": {"/ledger/records/N/", "/combinations/N/", "/audit/N/", "/approvals/N/"},
}
#: The top bar is one line: the text of each of its items is on one line, the items side by
#: side, and nothing sticks out of the window.
TOPBAR_ONE_LINE = """() => {
  const bar = document.querySelector("header.topbar");
  const texts = [...bar.querySelectorAll(".brand, nav a, .tenant, .user")];
  const items = [...texts, ...bar.querySelectorAll(".who select, .who button")];
  const lines = (e) => {
    const range = document.createRange();
    range.selectNodeContents(e);
    return new Set([...range.getClientRects()].map((r) => Math.round(r.top))).size;
  };
  const middles = items.map((e) => {
    const box = e.getBoundingClientRect();
    return box.top + box.height / 2;
  });
  return {
    wrapped: texts.filter((e) => lines(e) > 1).map((e) => e.textContent.trim()),
    spread: Math.max(...middles) - Math.min(...middles),
    overflow: document.documentElement.scrollWidth - window.innerWidth,
  };
}"""


def _signed_in_page(browser: Browser, base_url: str, name: str) -> Page:
    page = browser.new_context(viewport={"width": 1440, "height": 900}).new_page()
    sign_in(page, base_url, name)
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


def shape(path: str) -> str:
    """A path without its ids and query values: ``/audit/12/?before=9`` → ``/audit/N/?before``."""
    url = urlsplit(path)
    names = sorted(part.split("=", 1)[0] for part in url.query.split("&") if part)
    return re.sub(r"/\d+(?=/|$)", "/N", url.path) + (f"?{'&'.join(names)}" if names else "")


def _walk(page: Page, base_url: str, role: str) -> tuple[dict[str, int], dict[str, list[str]]]:
    """Visit the links reachable from the inbox (breadth first, ``PER_SHAPE`` of each shape);
    the status of each, and axe-core's violations on each page that has any. A download is
    fetched, not opened."""
    seen: dict[str, int] = {}
    inaccessible: dict[str, list[str]] = {}
    shapes: dict[str, int] = {}
    queue = [("/", False)]
    while queue and len(seen) < MAX_PAGES:
        path, download = queue.pop(0)
        if path in seen or shapes.get(shape(path), 0) >= PER_SHAPE:
            continue
        shapes[shape(path)] = shapes.get(shape(path), 0) + 1
        if download:
            seen[path] = page.request.get(f"{base_url}{path}").status
            continue
        response = page.goto(f"{base_url}{path}")
        assert response is not None
        seen[path] = response.status
        bar = page.evaluate(TOPBAR_ONE_LINE)
        assert bar["wrapped"] == [] and bar["spread"] <= 4 and bar["overflow"] <= 0, (path, bar)
        if found := axe.violations(page):
            inaccessible[path] = found
        slug = re.sub(r"[^a-z0-9]+", "-", path.lower()).strip("-") or "inbox"
        page.screenshot(path=str(SHOTS / f"walk-{role}-{slug}.png"), full_page=True)
        queue.extend(link for link in _links(page) if link[0] not in seen)
    return seen, inaccessible


#: Each role's walk in English, and the admin's (who sees every page) in Simplified Chinese too.
#: The operator's walk runs in `make test`; the others at full size (`scale`, `make drill`).
WALKS = [
    pytest.param(role, language, marks=() if role == "operator" else pytest.mark.scale)
    for role, language in [(role, "en") for role in DEMO_ROLES] + [("admin", "zh-hans")]
]


@pytest.mark.parametrize(("role", "language"), WALKS)
def test_every_link_a_role_sees_opens(
    browser: Browser, live_server, django_user_model, incident, role, language
):
    tenant = incident[0]
    console_user(django_user_model, tenant, role, role)
    page = _signed_in_page(browser, live_server.url, role)
    if language != "en":
        page.select_option("#language-switch", language)
        page.click("#language-switch + button")
        expect(page.locator("header.topbar nav")).not_to_contain_text("Inbox")
    statuses, inaccessible = _walk(
        page, live_server.url, role if language == "en" else f"{role}-{language}"
    )
    page.context.close()
    assert inaccessible == {}, "axe-core found accessibility violations"
    refused = {path: status for path, status in statuses.items() if status >= 400}
    assert refused == {}, f"{role} was shown links it cannot open"
    assert len(statuses) >= 5, statuses  # the walk got past the inbox
    assert len(statuses) < MAX_PAGES, "the walk stopped before it saw every page"
    assert OBJECT_PAGES[role] <= {shape(path) for path in statuses}, sorted(statuses)


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
