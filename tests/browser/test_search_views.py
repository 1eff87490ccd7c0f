"""Search and shareable views in real Chromium at 1440 x 900: a key fragment and a run id's
first 8 characters find their calls, a filtered URL opened in a new browser shows the same
rows, the CSV export is the page's rows, and a ledger row with a long key stays within two
lines."""

from __future__ import annotations

import csv
import io

import pytest
from playwright.sync_api import Browser, Page, expect

from tests.api.conftest import client_for
from tests.browser.conftest import PASSWORD, SHOTS, console_user

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

RUN = "4c1e9b27-support-session"
# Real keys are long: the runtime's prefix, the user, the run, the tool, the business object.
LONG_OBJECT = "cart-42-" + "line-item-" * 12

#: Each row's height and the most two lines of its cells' text may take (with their padding).
ROW_HEIGHTS = """
[...document.querySelectorAll('table.list tbody tr')].map(tr => {
  const td = tr.querySelector('td');
  const style = getComputedStyle(td);
  const line = parseFloat(style.lineHeight);
  const padding = parseFloat(style.paddingTop) + parseFloat(style.paddingBottom);
  return [tr.getBoundingClientRect().height, 2 * line + padding + 2];
})
"""


@pytest.fixture
def ledger(tenant):
    api = client_for(tenant)
    api.start_run(RUN)
    for cart in (LONG_OBJECT, "cart-7", "cart-8"):
        api.call("create_order", {"cart": cart}, run_id=RUN, step_id=cart, business_object_id=cart)
    api.start_run("other-run")
    api.call("read_file", {"path": "a"}, run_id="other-run", step_id="r")
    return tenant


def _signed_in(browser: Browser, base_url: str) -> Page:
    page = browser.new_context(viewport={"width": 1440, "height": 900}).new_page()
    page.goto(f"{base_url}/login/")
    page.fill("#id_username", "olga")
    page.fill("#id_password", PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_url(f"{base_url}/")
    return page


def _call_ids(page: Page) -> list[str]:
    """The call id of each row, from its deep link to the call in the run's timeline."""
    hrefs = page.eval_on_selector_all(
        "table.list tbody tr td a[href*='#call-']", "els => els.map(e => e.href)"
    )
    return [href.rsplit("#call-", 1)[1] for href in hrefs]


def test_search_share_and_export(browser: Browser, live_server, django_user_model, ledger):
    console_user(django_user_model, ledger, "olga", "operator")
    page = _signed_in(browser, live_server.url)
    page.goto(f"{live_server.url}/ledger/")
    page.fill("#id_key", "cart-42")
    page.click("form.filters button[type=submit]")
    expect(page.locator("table.list tbody tr")).to_have_count(1)
    key_cell = page.locator("table.list tbody tr .key")
    assert "cart-42-line-item" in (key_cell.get_attribute("title") or "")
    expect(page.locator("table.list tbody tr .key-cell button.copy")).to_be_visible()
    page.screenshot(path=str(SHOTS / "search-key-fragment.png"), full_page=True)

    page.goto(f"{live_server.url}/ledger/")
    page.fill("#id_run", RUN[:8])
    page.select_option("#id_range", "24h")
    page.click("form.filters button[type=submit]")
    expect(page.locator("table.list tbody tr")).to_have_count(3)
    assert "run=4c1e9b27" in page.url and "range=24h" in page.url
    rows = _call_ids(page)
    for height, most in page.evaluate(ROW_HEIGHTS):
        assert height <= most, f"a row is {height}px high, more than two lines ({most}px)"
    page.screenshot(path=str(SHOTS / "search-run-prefix.png"), full_page=True)

    # The same URL in a new browser shows the same rows.
    other = _signed_in(browser, live_server.url)
    other.goto(page.url)
    assert _call_ids(other) == rows
    expect(other.locator("#id_run")).to_have_value(RUN[:8])
    other.context.close()

    # The CSV export is the page's rows, in its order.
    href = page.get_attribute("a[href*='format=csv']", "href")
    export = page.request.get(f"{live_server.url}/ledger/{href}")
    assert export.ok and export.headers["content-type"].startswith("text/csv")
    exported = list(csv.DictReader(io.StringIO(export.text())))
    assert [row["call_id"] for row in exported] == rows
    assert all(row["run_id"] == RUN for row in exported)
    page.context.close()
