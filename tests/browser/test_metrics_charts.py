"""The metrics charts in real Chromium: the demo's 24 hours of history give every chart at
least 12 points over the default range, drawn by the vendored uPlot with labelled axes (a
percentage for the dedup hit rate) and values on hover, under the strict Content-Security-
Policy; without JavaScript each chart is a table."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from playwright.sync_api import Page, expect

from console.management.commands.demo_agent import backfill_history
from ledger.clock import db_now
from ledger.models import VersionCombination
from tests.browser.conftest import console_user, shot, sign_in

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


@pytest.fixture
def history(incident):
    tenant, _api, good, bad = incident
    combos = {
        "baseline": VersionCombination.objects.get(pk=good["id"]),
        "candidate": VersionCombination.objects.get(pk=bad["id"]),
    }
    backfill_history(tenant, combos, until=db_now() - timedelta(minutes=5))
    return tenant


def test_the_charts_have_a_shape_axes_and_hover_values(
    page: Page, live_server, django_user_model, history
):
    console_user(django_user_model, history, "maria", "manager")
    sign_in(page, live_server.url, "maria")
    page.set_viewport_size({"width": 1440, "height": 900})
    page.goto(f"{live_server.url}/metrics/")
    charts = page.locator("figure.chart")
    expect(charts).to_have_count(3)
    for n in range(3):
        chart = charts.nth(n)
        expect(chart.locator(".uplot canvas")).to_have_count(1)
        expect(chart.locator("table.chart-table")).to_be_hidden()
        points = len(
            page.evaluate(
                "id => JSON.parse(document.getElementById(id).textContent).times",
                chart.locator("[data-chart]").get_attribute("data-chart"),
            )
        )
        assert points >= 12, points
        box = chart.locator(".uplot canvas").bounding_box()
        assert box and box["width"] > 300 and box["height"] > 150
    dedup = charts.nth(0)
    assert dedup.locator("[data-chart]").get_attribute("data-y-label") == "%"
    assert "time" in (dedup.locator("[data-chart]").get_attribute("data-x-label") or "")
    # Hovering over the plot shows each combination's value there, as a percentage.
    over = dedup.locator(".u-over")
    box = over.bounding_box()
    assert box
    page.mouse.move(box["x"] + box["width"] * 0.9, box["y"] + box["height"] / 2)
    values = dedup.locator(".u-legend .u-series .u-value")
    expect(values.nth(1)).to_contain_text("%")
    shot(page, "metrics-charts")


def test_without_javascript_each_chart_is_a_table(
    page_without_js: Page, live_server, django_user_model, history
):
    console_user(django_user_model, history, "maria", "manager")
    sign_in(page_without_js, live_server.url, "maria")
    page_without_js.goto(f"{live_server.url}/metrics/")
    tables = page_without_js.locator("table.chart-table")
    expect(tables).to_have_count(3)
    # Folded: a day of 5-minute rows per chart would make the page tens of screens long.
    height = page_without_js.evaluate("document.body.scrollHeight")
    assert height < 3 * 900, height
    page_without_js.locator("details.chart-numbers summary").first.click()
    expect(tables.nth(0)).to_be_visible()
    assert tables.nth(0).locator("tbody tr").count() >= 12
    expect(tables.nth(0).locator("tbody")).to_contain_text("%")
    shot(page_without_js, "metrics-charts-no-js")


def test_the_charts_legend_is_in_the_users_language(
    page: Page, live_server, django_user_model, history
):
    from console.models import Preferences

    user = console_user(django_user_model, history, "mei", "manager")
    Preferences.objects.create(user=user, language="zh-hans")
    sign_in(page, live_server.url, "mei")
    page.goto(f"{live_server.url}/metrics/")
    chart = page.locator("figure.chart").first
    legend = chart.locator(".u-legend .u-series .u-label")
    expect(legend.first).to_have_text("时间")
    # The time under the pointer is written in Chinese on a 24-hour clock: 12月3日 15:40.
    box = chart.locator(".u-over").bounding_box()
    assert box
    page.mouse.move(box["x"] + box["width"] * 0.9, box["y"] + box["height"] / 2)
    moment = chart.locator(".u-legend .u-series .u-value").first
    expect(moment).to_have_text(re.compile(r"^\d{1,2}月\d{1,2}日 [0-2]\d:[0-5]\d$"))
    shot(page, "metrics-charts-zh")


#: Pixels of the threshold colour (charts.js LIMIT, #b91c1c) on a chart's canvas: no series is
#: drawn in it.
LIMIT_PIXELS = """canvas => {
  const data = canvas.getContext("2d").getImageData(0, 0, canvas.width, canvas.height).data;
  let found = 0;
  for (let i = 0; i < data.length; i += 4) {
    if (Math.abs(data[i] - 185) < 8 && Math.abs(data[i + 1] - 28) < 8
        && Math.abs(data[i + 2] - 28) < 8 && data[i + 3] > 200) found++;
  }
  return found;
}"""


def test_a_threshold_is_a_labelled_line_on_its_metrics_chart(
    page: Page, live_server, django_user_model, history
):
    from ledger.combinations import thresholds

    for metric, above, action in [
        ("uncertain_results", 40, "alert"),
        ("dedup_hit_rate", 0.5, "halt"),
    ]:
        thresholds.add_threshold(
            tenant=history,
            actor="maria",
            source="test",
            metric=metric,
            above=above,
            window_minutes=60,
            action=action,
        )
    console_user(django_user_model, history, "maria", "manager")
    sign_in(page, live_server.url, "maria")
    page.set_viewport_size({"width": 1440, "height": 900})
    page.goto(f"{live_server.url}/metrics/")
    dedup, uncertain, duplicates = (
        page.locator(f"#chart-{key}") for key in ("dedup", "uncertain", "duplicates")
    )
    expect(dedup.locator("ul.limits li")).to_have_text(["Threshold: halts above 50% over 60 min"])
    expect(uncertain.locator("ul.limits li")).to_have_text(
        ["Threshold: alerts above 40 over 60 min"]
    )
    expect(duplicates.locator("ul.limits")).to_have_count(0)
    for chart in (dedup, uncertain):
        canvas = chart.locator(".uplot canvas")
        width = canvas.evaluate("c => c.width")
        # A dashed line across the plot: well over a third of the canvas's width in pixels, even
        # when the count's axis had to grow to reach it (the demo's history stays below 40).
        assert canvas.evaluate(LIMIT_PIXELS) > width / 3
    assert duplicates.locator(".uplot canvas").evaluate(LIMIT_PIXELS) == 0
    shot(page, "metrics-charts-thresholds")


@pytest.mark.parametrize("width", [1440, 390])
def test_a_refused_threshold_is_shown_again_as_typed(
    page: Page, live_server, django_user_model, history, width: int
):
    """A manager adds a threshold the ledger refuses (a window of 0 minutes): the page says why
    and keeps what was typed, at desktop and phone widths."""
    console_user(django_user_model, history, "maria", "manager")
    sign_in(page, live_server.url, "maria")
    page.set_viewport_size({"width": width, "height": 900})
    page.goto(f"{live_server.url}/metrics/")
    page.select_option("#metric", "uncertain_results")
    page.fill("#above", "40")
    page.fill("#window_minutes", "0")
    page.select_option("#action", "halt")
    page.fill("#email", "oncall@example.com")
    page.get_by_role("button", name="Add").click()
    expect(page.locator(".messages, [role=alert]").first).to_contain_text("window_minutes")
    expect(page.locator("#metric")).to_have_value("uncertain_results")
    expect(page.locator("#above")).to_have_value("40")
    expect(page.locator("#window_minutes")).to_have_value("0")
    expect(page.locator("#action")).to_have_value("halt")
    expect(page.locator("#email")).to_have_value("oncall@example.com")
    shot(page, f"metrics-threshold-refused-{width}")
