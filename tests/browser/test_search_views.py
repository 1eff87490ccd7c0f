"""Search and shareable views in real Chromium at 1440 x 900: a key fragment and a run id's
first 8 characters find their calls, a filtered URL opened in a new browser shows the same
rows, the CSV export is the page's rows, and a ledger row with a long key stays within two
lines. The top bar's search box at 1440 and 390 px, in English and Chinese: a pasted id opens
its page."""

from __future__ import annotations

import csv
import io

import pytest
from playwright.sync_api import Browser, Page, expect

from tests.api.conftest import client_for
from tests.browser.conftest import PASSWORD, SHOTS, console_user, shot

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


#: Each window the top bar's box is used at: a laptop's and a phone's.
WINDOWS = {"1440": {"width": 1440, "height": 900}, "390": {"width": 390, "height": 844}}


@pytest.mark.parametrize(
    ("window", "language"),
    [
        # `make test` takes each window and each language once; `make drill` the other pairs.
        ("1440", "en"),
        ("390", "zh-hans"),
        pytest.param("1440", "zh-hans", marks=pytest.mark.scale),
        pytest.param("390", "en", marks=pytest.mark.scale),
    ],
)
def test_an_id_pasted_in_the_top_bar_opens_its_page(
    browser: Browser, live_server, django_user_model, ledger, language, window
):
    """A call id, a run id and an order id from a recorded result, each pasted in the box of
    the top bar (reached with the ``s`` key, or by a tap), open their pages; part of a key
    lists the actions it matches, each with its kind."""
    from ledger.models import IdempotencyRecord, LedgerEntry, Run

    api = client_for(ledger)
    call = api.call(
        "create_order", {"cart": "cart-9"}, run_id=RUN, step_id="c9", business_object_id="cart-9"
    ).json()
    api.post(
        f"/calls/{call['call_id']}/complete",
        {"fencing_token": 1, "outcome": "succeeded", "result": {"order_id": "ord_8f3a"}},
    )
    console_user(django_user_model, ledger, "olga", "operator")
    page = browser.new_context(viewport=WINDOWS[window], locale=language).new_page()
    page.goto(f"{live_server.url}/login/")
    page.fill("#id_username", "olga")
    page.fill("#id_password", PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_url(f"{live_server.url}/")
    if language != "en":  # on the user's settings page, which a phone's top bar links to
        page.goto(f"{live_server.url}/preferences/")
        page.select_option("#pref-language", language)
        page.click("form button[type=submit].primary")
        expect(page.locator("header.topbar nav")).not_to_contain_text("Inbox")
    box = page.locator("header.topbar form[role=search] input[name=id]")
    expect(box).to_be_visible()
    assert box.bounding_box()["width"] >= 120  # room to see what was pasted
    entry = LedgerEntry.objects.get(call_id=call["call_id"])
    record = IdempotencyRecord.objects.get(key=call["idempotency_key"])
    found = {
        call["call_id"]: f"/ledger/calls/{entry.pk}/",
        RUN: f"/ledger/runs/{Run.objects.get(run_id=RUN).pk}/",
        "ord_8f3a": f"/ledger/records/{record.pk}/",
    }
    shots = f"{window}-{language}"
    for n, (text, path) in enumerate(found.items()):
        page.goto(f"{live_server.url}/ledger/runs/")
        if n == 0 and window == "1440":
            page.keyboard.press("s")  # the shortcut moves to the box
            expect(box).to_be_focused()
            page.keyboard.insert_text(text)  # pasted
            page.keyboard.press("Enter")
        else:
            box.fill(text)
            page.locator("header.topbar form[role=search] button").click()
        page.wait_for_url(f"{live_server.url}{path}")
        shot(page, f"search-box-{shots}-{n}")
    box.fill("cart-")
    box.press("Enter")
    page.wait_for_url("**/ledger/find?id=cart-")
    expect(page.locator("table.list tbody tr")).to_have_count(4)  # cart-42..., cart-7, 8, 9
    expect(page.locator("h1")).to_be_visible()
    overflow = page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
    assert overflow <= 0, f"the matches are {overflow}px wider than the window"
    shot(page, f"search-box-{shots}-matches")
    box.fill("ord_nothing")
    box.press("Enter")
    expect(page.locator("main")).to_contain_text("ord_nothing")
    shot(page, f"search-box-{shots}-nothing")
    page.context.close()
