"""A combination's lifecycle in real Chromium at 1440x900, in English and in Chinese: halt a
canary (its page names the approval it voids and the run it stops), resume it (back to its
share, not to active); retire a halted one; roll back the only active combination (the page
says which ones it can restore); a rollback's result lists what it queued for look-up apart
from what needs a human, each with its state and a link. The combinations list keeps each row
one line high with its actions in a menu. Screenshots of every step are kept."""

from __future__ import annotations

import pytest
from playwright.sync_api import Page, expect

from console.models import Preferences
from ledger import combinations
from ledger.models import (
    ApprovalRequest,
    IdempotencyRecord,
    Run,
    Tenant,
    VersionCombination,
    WorkspaceRoot,
)
from ledger.services.runs import pick_combination
from reconcile.operator_actions import escalate
from tests.browser.conftest import VERSIONS, console_user, shot, sign_in
from tests.browser.test_console_pages import UNLABELLED_CONTROLS
from tests.console.conftest import make_pending

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]
#: Each walk in English in `make test`, in Chinese too in `make drill` (docs/testing.md).
LANGUAGES = ["en", pytest.param("zh-hans", marks=pytest.mark.scale)]


def _combo(tenant: Tenant, label: str) -> VersionCombination:
    combination, _ = combinations.create_combination(
        tenant=tenant, label=label, actor="x", source="api", **{**VERSIONS, "prompt": label}
    )
    return combination


def _manager(page: Page, live_server, django_user_model, tenant: Tenant, language: str) -> None:
    user = console_user(django_user_model, tenant, "maria", "manager")
    Preferences.objects.create(user=user, language=language)
    page.set_viewport_size({"width": 1440, "height": 900})
    sign_in(page, live_server.url, "maria")


def _menu(page: Page, label: str, item: str) -> None:
    """Open the Actions menu of the list's row of ``label`` and follow its ``item`` link (by
    its URL's last part, the same in every language)."""
    row = page.locator("table.list tbody tr", has=page.get_by_role("link", name=label, exact=True))
    row.locator("details.row-menu > summary").click()
    row.locator(f"details.row-menu a[href*='/{item}']").click()


def _canary_with_work(tenant: Tenant) -> tuple[VersionCombination, VersionCombination, str]:
    """An active baseline and a 10% canary with a run in flight and a write waiting for an
    approval under it."""
    baseline, candidate = _combo(tenant, "baseline"), _combo(tenant, "candidate")
    combinations.activate(tenant=tenant, combination_id=baseline.pk, actor="x", source="api")
    combinations.set_canary(
        tenant=tenant, combination_id=candidate.pk, share_bp=1000, actor="x", source="api"
    )
    run_id = next(
        r for r in (f"run-{n}" for n in range(1000)) if pick_combination(tenant, r) == candidate
    )
    make_pending(tenant, "settings.py", run_id=run_id)
    assert ApprovalRequest.objects.get().entry.combination_id == candidate.pk
    return baseline, candidate, run_id


@pytest.mark.parametrize("language", LANGUAGES)
def test_halt_then_resume_gives_back_the_canary_at_its_share(
    page: Page, live_server, django_user_model, language: str
) -> None:
    tenant = Tenant.objects.create(slug="acme", name="Acme")
    baseline, candidate, run_id = _canary_with_work(tenant)
    _manager(page, live_server, django_user_model, tenant, language)
    page.goto(f"{live_server.url}/combinations/")
    _menu(page, "candidate", "halt")
    expect(page.locator("#halt-approvals + ul li")).to_have_count(1)
    expect(page.locator("#halt-runs + ul")).to_contain_text(run_id)
    if language == "en":
        expect(page.locator("#halt-approvals")).to_have_text("1 open approval will be invalidated")
    assert page.evaluate(UNLABELLED_CONTROLS) == []
    shot(page, f"lifecycle-halt-preview-{language}")
    assert VersionCombination.objects.get(pk=candidate.pk).state == "canary"

    page.fill("#reason", "error spike at 10%")
    page.locator(".decide button[type=submit]").click()
    page.wait_for_url(f"{live_server.url}/combinations/")
    if language == "en":
        expect(page.locator(".messages")).to_contain_text(
            "Halted candidate: new runs and calls under it are refused; 1 approval invalidated; "
            "1 run in flight is refused its next call."
        )
    else:
        expect(page.locator(".messages")).to_contain_text("已叫停 candidate")
    shot(page, f"lifecycle-halted-{language}")
    assert ApprovalRequest.objects.get().state == "invalidated"

    _menu(page, "candidate", "resume")
    expect(page.locator("#resume-to")).to_contain_text("10%")
    if language == "en":
        expect(page.locator("#resume-to")).to_have_text(
            "candidate returns to what it was before the halt: a canary at 10% of new runs."
        )
    shot(page, f"lifecycle-resume-preview-{language}")
    page.fill("#reason", "the spike was the load test")
    page.locator(".decide button[type=submit]").click()
    page.wait_for_url(f"{live_server.url}/combinations/")
    shot(page, f"lifecycle-resumed-{language}")
    resumed = VersionCombination.objects.get(pk=candidate.pk)
    assert (resumed.state, resumed.canary_share_bp) == ("canary", 1000)
    assert VersionCombination.objects.get(pk=baseline.pk).state == "active"
    row = page.locator("tr", has=page.get_by_role("link", name="candidate", exact=True))
    expect(row).to_contain_text("10%")


@pytest.mark.parametrize("language", LANGUAGES)
def test_a_halted_combination_is_retired_from_its_page(
    page: Page, live_server, django_user_model, language: str
) -> None:
    tenant = Tenant.objects.create(slug="acme", name="Acme")
    _baseline, candidate, run_id = _canary_with_work(tenant)
    combinations.halt(
        tenant=tenant, combination_id=candidate.pk, actor="x", source="api", reason="spike"
    )
    _manager(page, live_server, django_user_model, tenant, language)
    page.goto(f"{live_server.url}/combinations/{candidate.pk}/")
    shot(page, f"lifecycle-halted-page-{language}")
    page.locator(f"ul.change-links a[href$='/{candidate.pk}/retire']").click()
    expect(page.locator("#change-effects")).to_contain_text(run_id)
    if language == "en":
        expect(page.locator("#change-effects")).to_contain_text(
            "its runs in flight are halted with it"
        )
    shot(page, f"lifecycle-retire-preview-{language}")
    page.fill("#reason", "discard the candidate")
    page.locator(".decide button[type=submit]").click()
    page.wait_for_url(f"{live_server.url}/combinations/{candidate.pk}/")
    shot(page, f"lifecycle-retired-{language}")
    assert VersionCombination.objects.get(pk=candidate.pk).state == "retired"
    assert Run.objects.get(run_id=run_id).status == "halted"
    expect(page.locator("h1 .badge")).to_have_text("retired" if language == "en" else "已退役")


@pytest.mark.parametrize("language", LANGUAGES)
def test_rolling_back_the_only_active_combination_says_what_it_can_restore(
    page: Page, live_server, django_user_model, language: str
) -> None:
    tenant = Tenant.objects.create(slug="acme", name="Acme")
    only, spare = _combo(tenant, "only"), _combo(tenant, "spare")
    combinations.activate(tenant=tenant, combination_id=only.pk, actor="x", source="api")
    _manager(page, live_server, django_user_model, tenant, language)
    page.goto(f"{live_server.url}/combinations/")
    _menu(page, "only", "rollback")
    expect(page.locator("#rollback-no-previous")).to_be_visible()
    expect(page.locator(".error")).to_have_count(0)
    expect(page.locator("#restore-choices li")).to_have_count(1)
    if language == "en":
        expect(page.locator("#rollback-no-previous h2")).to_have_text(
            "There is no previous combination to restore"
        )
    else:
        expect(page.locator("#rollback-no-previous h2")).to_have_text(
            "没有可以恢复的上一个版本组合"
        )
    shot(page, f"lifecycle-rollback-no-previous-{language}")
    page.locator("#restore-choices a").click()
    expect(page.locator("#restore")).to_have_value(str(spare.pk))
    shot(page, f"lifecycle-rollback-chosen-{language}")
    page.fill("#reason", "bad prompt")
    page.locator(".decide button[type=submit]").click()
    expect(page.locator("#rollback-steps li")).to_have_count(5)
    shot(page, f"lifecycle-rollback-chosen-result-{language}")
    states = dict(VersionCombination.objects.values_list("label", "state"))
    assert states == {"only": "halted", "spare": "active"}


@pytest.mark.parametrize("language", LANGUAGES)
def test_the_rollback_result_lists_queued_look_ups_apart_from_what_needs_a_human(
    page: Page, live_server, django_user_model, incident, language: str
) -> None:
    tenant, _api, good, bad = incident
    # A write waiting for approval whose file nobody has checked yet, in a registered
    # workspace: a worker can check it. (The incident's own waiting write reported its file
    # unchanged, which escalated it as not landed: it needs a human.)
    WorkspaceRoot.objects.create(tenant=tenant, name="repo", path="/srv/repo")
    make_pending(tenant, "unchecked.py", run_id="run-unchecked", checked=False)
    orders = IdempotencyRecord.objects.filter(
        tenant=tenant, combination_id=bad["id"], state="unknown", tool__name="create_order"
    ).order_by("pk")
    escalate(record=orders[0], actor="olga", reason="the shop says maybe")
    Preferences.objects.create(
        user=console_user(django_user_model, tenant, "maria", "manager"), language=language
    )
    page.set_viewport_size({"width": 1440, "height": 900})
    sign_in(page, live_server.url, "maria")
    page.goto(f"{live_server.url}/combinations/{bad['id']}/rollback")
    expect(page.locator("#rollback-lookups li")).to_have_count(1)
    expect(page.locator("#rollback-needs-human li")).to_have_count(4)
    shot(page, f"lifecycle-rollback-preview-{language}")
    page.fill("#reason", "duplicate orders since prompt-v2")
    page.locator(".decide button[type=submit]").click()
    expect(page.locator("h1")).to_contain_text("prompt-v2")
    queued = page.locator("#rollback-lookups li")
    expect(queued).to_have_count(1)
    expect(queued).to_contain_text("write_file")
    expect(queued.locator(".badge")).to_have_text(["unknown" if language == "en" else "未知"])
    human = page.locator("#rollback-needs-human li")
    expect(human).to_have_count(4)
    expect(human.locator("a.key")).to_have_count(4)
    if language == "en":
        expect(human.first).to_contain_text("unknown call escalated")
        expect(human.first).to_contain_text("the shop says maybe")
        expect(human.nth(1)).to_contain_text("The write did not land")
        expect(human.nth(2)).to_contain_text("no downstream adapter")
        expect(page.locator("#rollback-steps")).to_contain_text("Queued 1 unknown call")
        expect(page.locator("#rollback-steps")).to_contain_text("Restored baseline")
        expect(page.locator("#rollback-restores")).to_have_text(
            "Restored combination: baseline active"
        )
    expect(page.locator("#rollback-steps a", has_text="baseline")).to_have_count(1)
    row_height = page.eval_on_selector_all(
        "#rollback-needs-human li", "els => els.map(e => e.getBoundingClientRect().height)"
    )
    assert max(row_height) < 60, row_height  # a long key stays on one line
    shot(page, f"lifecycle-rollback-result-{language}")
    assert VersionCombination.objects.get(pk=good["id"]).state == "active"
    record_id = orders[0].pk
    human.first.locator("a.key").click()
    page.wait_for_url(f"{live_server.url}/ledger/records/{record_id}/")


ROW_BOXES = """() => [...document.querySelectorAll("table.list tbody tr")].map((row) => {
  const cells = [...row.cells].slice(0, -1);
  const text = Math.max(...cells.map((c) => c.getBoundingClientRect().height));
  const menu = row.querySelector("details.row-menu > summary").getBoundingClientRect();
  return {row: row.getBoundingClientRect().height, text, menu: menu.height,
          line: parseFloat(getComputedStyle(row).lineHeight)};
})"""


def test_each_row_of_the_combinations_list_stays_readable_at_1440(
    page: Page, live_server, django_user_model
) -> None:
    tenant = Tenant.objects.create(slug="acme", name="Acme")
    made = {label: _combo(tenant, label) for label in ("baseline", "canary", "shadow", "halted")}
    _combo(tenant, "new-one")
    ids = {"tenant": tenant, "actor": "x", "source": "api"}
    combinations.activate(**ids, combination_id=made["baseline"].pk)
    combinations.set_canary(**ids, combination_id=made["canary"].pk, share_bp=1000)
    combinations.set_shadow(**ids, combination_id=made["shadow"].pk, share_bp=2500)
    combinations.set_canary(**ids, combination_id=made["halted"].pk, share_bp=500)
    combinations.halt(**ids, combination_id=made["halted"].pk, reason="spike")
    _manager(page, live_server, django_user_model, tenant, "en")
    page.goto(f"{live_server.url}/combinations/")
    shot(page, "lifecycle-combinations-list-1440")
    rows = page.evaluate(ROW_BOXES)
    assert len(rows) == 5
    for row in rows:
        # The actions are one line (the menu's button), no taller than the row's text, which
        # is its label and one line of versions.
        assert row["menu"] < 1.6 * row["line"], row
        assert row["row"] <= max(row["text"], row["menu"]) + 1, row
        assert row["text"] < 3.5 * row["line"], row
    page.locator("details.row-menu > summary").first.click()
    opened = page.evaluate(ROW_BOXES)
    assert [r["row"] for r in opened] == [r["row"] for r in rows]  # the menu opens over them
    shot(page, "lifecycle-combinations-menu-open-1440")
    assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
