"""Layouts that must hold at a laptop's 1440x900 in real Chromium: the combination page's
changes sit one a line inside their card; the metrics charts' time
axis spans the dashboard's range even when every point falls in one bucket."""

from __future__ import annotations

import itertools

import pytest
from playwright.sync_api import Page, expect

from ledger import combinations
from ledger.models import VersionCombination
from tests.browser.conftest import VERSIONS, console_user, shot, sign_in

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

GAP = 8  # px


def _boxes(page: Page, selector: str) -> list[dict[str, float]]:
    return page.eval_on_selector_all(
        selector,
        "els => els.map(e => { const r = e.getBoundingClientRect();"
        " return {x: r.x, y: r.y, right: r.right, bottom: r.bottom, height: r.height}; })",
    )


def test_a_canary_combinations_changes_are_laid_out_one_a_line(
    page: Page, live_server, django_user_model, incident
) -> None:
    tenant, *_ = incident
    candidate, _ = combinations.create_combination(
        tenant=tenant, label="prompt-v3", actor="m", source="api", **{**VERSIONS, "prompt": "p-3"}
    )
    combinations.set_canary(
        tenant=tenant, combination_id=candidate.pk, share_bp=1000, actor="m", source="api"
    )
    assert VersionCombination.objects.get(pk=candidate.pk).state == "canary"
    console_user(django_user_model, tenant, "maria", "manager")
    sign_in(page, live_server.url, "maria")
    page.set_viewport_size({"width": 1440, "height": 900})
    page.goto(f"{live_server.url}/combinations/{candidate.pk}/")
    shot(page, "combination-controls-1440")
    # promote, resume is not offered, canary share, shadow, halt, retire, roll back
    links = _boxes(page, ".card ul.change-links a")
    assert len(links) == 6, links
    card = _boxes(page, ".card:has(ul.change-links)")[0]
    for box in links:
        assert card["x"] < box["x"] and box["right"] < card["right"], (box, card)
    # A change a line, one under the other and left-aligned, each on one line of text.
    for above, below in itertools.pairwise(links):
        assert below["y"] - above["bottom"] >= GAP, (above, below)
    assert len({round(box["x"]) for box in links}) == 1, links
    tallest = max(box["height"] for box in links)
    assert all(box["height"] > tallest / 2 for box in links), links


def test_the_time_axis_spans_the_range_when_every_point_is_in_one_bucket(
    page: Page, live_server, django_user_model, incident
) -> None:
    tenant, *_ = incident
    console_user(django_user_model, tenant, "maria", "manager")
    sign_in(page, live_server.url, "maria")
    page.set_viewport_size({"width": 1440, "height": 900})
    page.goto(f"{live_server.url}/metrics/")
    chart = page.locator("figure.chart").first
    expect(chart.locator(".uplot canvas")).to_have_count(1)
    data = page.evaluate(
        "id => JSON.parse(document.getElementById(id).textContent)",
        chart.locator("[data-chart]").get_attribute("data-chart"),
    )
    shot(page, "metrics-one-bucket-1440")
    assert len(data["times"]) <= 2  # the fixture's calls, a minute apart at most
    assert data["end"] - data["start"] == 24 * 3600
    # Under the pointer, the point marker sits where its time falls in those 24 hours (the
    # axis is drawn on the canvas; the marker is an element).
    over = chart.locator(".u-over")
    box = over.bounding_box()
    assert box
    page.mouse.move(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
    marker = chart.locator(".u-cursor-pt").nth(1)
    expect(marker).to_be_visible()
    point = marker.bounding_box()
    assert point
    at = (point["x"] + point["width"] / 2 - box["x"]) / box["width"]
    expected = (data["times"][-1] - data["start"]) / (data["end"] - data["start"])
    assert abs(at - expected) < 0.02, (at, expected)
