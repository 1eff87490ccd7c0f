"""The shadow comparison and the rollout pages in real Chromium, without JavaScript: a manager
reads a shadow pair's differing steps, starts a rollout, sees its analysis and pauses it."""

from __future__ import annotations

import pytest
from playwright.sync_api import Page, expect

from ledger import combinations
from ledger.models import AuditEvent, RolloutPlan, Tenant, VersionCombination
from reconcile.tasks import evaluate_rollouts
from tests.browser.conftest import console_user, shot, sign_in
from tests.browser.test_console_pages import UNLABELLED_CONTROLS
from tests.console.conftest import make_shadow_pair

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def test_a_manager_compares_a_shadow_run_and_runs_a_rollout(
    page_without_js: Page, live_server, django_user_model
) -> None:
    page = page_without_js
    tenant = Tenant.objects.create(slug="acme", name="Acme")
    make_shadow_pair(tenant)
    candidate, _ = combinations.create_combination(
        tenant=tenant,
        label="prompt-v3",
        actor="x",
        source="api",
        model="m",
        prompt="p3",
        rules="r",
        tool_schema="t",
        data_version="d",
    )
    console_user(django_user_model, tenant, "maria", "manager")
    sign_in(page, live_server.url, "maria")

    # The shadow comparison and the rollouts are pages of the combinations.
    page.click("nav >> text=Combinations")
    page.click("p.subnav >> text=Shadow")
    expect(page.locator("h1")).to_contain_text("Shadow runs beside live runs")
    assert page.evaluate(UNLABELLED_CONTROLS) == []
    page.get_by_role("link", name="shadow-1", exact=True).click()
    expect(page.locator("tr.differs")).to_have_count(2)
    expect(page.locator("tr.differs").first).to_contain_text("shadow dry run")
    shot(page, "page-shadow-pair")

    page.click("nav >> text=Combinations")
    page.click("p.subnav >> text=Rollouts")
    page.select_option("#rollout-candidate", str(candidate.pk))
    page.fill("#rollout-shares", "10, 100")
    page.fill("#rollout-minutes", "0")
    page.fill("#rollout-samples", "0")
    assert page.evaluate(UNLABELLED_CONTROLS) == []
    page.click("text=Start the rollout")
    expect(page.locator(".messages")).to_contain_text("Rollout started")
    plan = RolloutPlan.objects.get()
    assert VersionCombination.objects.get(pk=candidate.pk).canary_share_bp == 1000
    page.fill("#rollout-reason", "hold for the launch")
    page.click("button[value=pause]")
    expect(page.locator("h1")).to_contain_text("paused")
    assert AuditEvent.objects.get(action="rollout.paused").detail == "hold for the launch"
    page.fill("#rollout-reason", "launch done")
    page.click("button[value=resume]")
    evaluate_rollouts()
    page.goto(f"{live_server.url}/rollouts/{plan.pk}/")
    expect(page.locator("h1")).to_contain_text("completed")
    expect(page.locator("#step-0")).to_contain_text("advance")
    shot(page, "page-rollout")


def test_a_manager_puts_a_candidate_in_shadow_from_the_combinations_list(
    page_without_js: Page, live_server, django_user_model
) -> None:
    page = page_without_js
    tenant = Tenant.objects.create(slug="acme", name="Acme")
    made = {}
    for label, prompt in (("baseline", "p1"), ("prompt-v3", "p3")):
        made[label], _ = combinations.create_combination(
            tenant=tenant,
            label=label,
            actor="x",
            source="api",
            model="m",
            prompt=prompt,
            rules="r",
            tool_schema="t",
            data_version="d",
        )
    combinations.activate(
        tenant=tenant, combination_id=made["baseline"].pk, actor="x", source="api"
    )
    candidate = made["prompt-v3"]
    console_user(django_user_model, tenant, "maria", "manager")
    sign_in(page, live_server.url, "maria")

    page.click("nav >> text=Combinations")
    assert page.evaluate(UNLABELLED_CONTROLS) == []
    shot(page, "page-combinations-candidate")
    row = page.locator("tr", has_text="prompt-v3")
    row.locator("details.row-menu > summary").click()
    row.locator("text=Put in shadow…").click()
    expect(page.locator("h1")).to_contain_text("Put prompt-v3 in shadow")
    assert page.evaluate(UNLABELLED_CONTROLS) == []
    page.fill("#share_bp", "2500")
    page.fill("#reason", "compare prompt v3")
    page.click(".decide button[type=submit]")
    expect(page.locator(".messages")).to_contain_text("prompt-v3 is in shadow: 25% of live runs")
    expect(row).to_contain_text("25%")
    stored = VersionCombination.objects.get(pk=candidate.pk)
    assert (stored.state, stored.canary_share_bp) == ("shadow", 2500)
    event = AuditEvent.objects.get(action="combination.shadow")
    assert (event.actor, event.source, event.detail) == ("maria", "console", "compare prompt v3")
    shot(page, "page-combinations-shadow")

    row.locator("details.row-menu > summary").click()
    row.locator("text=Take out of shadow…").click()
    expect(page.locator("#unshadow-to")).to_contain_text("new")
    page.fill("#reason", "seen enough")
    page.click(".decide button[type=submit]")
    expect(page.locator(".messages")).to_contain_text("Out of shadow: prompt-v3 is new again.")
    assert VersionCombination.objects.get(pk=candidate.pk).state == "new"
