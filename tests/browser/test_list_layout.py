"""Every list page of the console at 1440 x 900, in English and in Simplified Chinese, on data
with every decision, status, observation code, escalation kind and badge, long keys, run ids,
paths and labels: each table row is at most two lines of text high, and nothing makes the page
wider than the window. Each page is kept as a screenshot."""

from __future__ import annotations

import uuid

import pytest
from playwright.sync_api import Browser, Page, expect

from ledger import combinations
from ledger.domain import Decision, EntryStatus, EscalationKind, ObservationCode
from ledger.models import IdempotencyRecord, LedgerEntry, VersionCombination
from ledger.records.escalation import escalate
from ledger.services.audit import audit
from tests.api.conftest import client_for
from tests.browser.conftest import SHOTS, console_user, sign_in
from tests.console.conftest import make_pending

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

WIDTH, HEIGHT = 1440, 900
LIST_PAGES = (
    "/ledger/",
    "/ledger/runs/",
    "/unknown/",
    "/approvals/",
    "/audit/",
    "/tools/",
    "/combinations/",
)
#: Each row's height and the most two lines of its cells' text may take (with their padding),
#: and the page's width against the window's.
MEASURE = """() => ({
  rows: [...document.querySelectorAll('table.list tbody tr')].map((tr, i) => {
    const style = getComputedStyle(tr.querySelector('td'));
    const line = parseFloat(style.lineHeight);
    const padding = parseFloat(style.paddingTop) + parseFloat(style.paddingBottom);
    return [i, Math.round(tr.getBoundingClientRect().height), 2 * line + padding + 2];
  }),
  width: document.documentElement.scrollWidth,
})"""
#: Long texts as agents and people write them.
LONG = "line-item-" * 10
VERSIONS = {"model": "m-1", "prompt": "p-1", "rules": "r-1", "tool_schema": "t-1"}


def _every_kind(tenant) -> None:
    """Calls of every decision, status and observation code (dedup hits among them) under a
    long-labelled combination, in runs with uuid ids; unknown calls escalated in every kind
    with long reasons; approvals of long paths; audit events about combinations."""
    for n, label in enumerate(("checkout-agent-baseline-2025-06", "checkout-agent-prompt-v2")):
        combo, _ = combinations.create_combination(
            tenant=tenant, label=label, actor="x", source="api", data_version=str(n), **VERSIONS
        )
        combinations.activate(tenant=tenant, combination_id=combo.pk, actor="x", source="api")
    api = client_for(tenant)
    run_id = str(uuid.uuid4())
    api.start_run(run_id)
    for n, kind in enumerate([None, *EscalationKind]):
        cart = f"cart-{n}-{LONG}"
        call = api.call(
            "create_order", {"cart": cart}, run_id=run_id, step_id=cart, business_object_id=cart
        ).json()
        api.post(f"/calls/{call['call_id']}/complete", {"fencing_token": 1, "outcome": "uncertain"})
        if kind is not None:
            record = IdempotencyRecord.objects.get(key=call["idempotency_key"])
            reason = f"{kind.value}: the downstream could not be asked about {cart}, twice over"
            escalate(record, kind, reason, actor="worker", source="system")
    model = LedgerEntry.objects.filter(tenant=tenant).exclude(idempotency_key="").first()
    assert model is not None
    record_of_model = model.record
    codes = sorted(ObservationCode, key=len, reverse=True)
    kinds = [(d, codes[0], True, EntryStatus.UNCERTAIN) for d in Decision]
    kinds += [(Decision.EXECUTE, "", False, s) for s in EntryStatus]
    kinds += [(Decision.WAIT, code, True, EntryStatus.PLANNED) for code in codes]
    for n, (decision, code, reused, status) in enumerate(kinds):
        model.pk, model.call_id = None, uuid.uuid4()
        model.step_id = f"kind-{n}"
        model.decision, model.observation_code = decision, code
        model.reused_record, model.status = reused, status
        # A shadow run's dry run reserves no key (a database constraint); its key is shown.
        model.record = None if decision == Decision.SHADOW_DRY_RUN else record_of_model
        model.save()
    for n in range(3):
        make_pending(
            tenant, f"services/checkout/{LONG}/settings_{n}.py", run_id=str(uuid.uuid4()), api=api
        )
    for combo in VersionCombination.objects.filter(tenant=tenant):
        audit(
            tenant=tenant,
            actor="release-manager@example.com",
            action="combination.noted",
            target=combo,
            source="console",
            detail="A long note about why: " + LONG * 3,
        )


def _measure(page: Page, base_url: str, path: str, language: str) -> list[str]:
    """What is wrong with ``path`` at 1440 x 900: rows over two lines, a page wider than the
    window."""
    response = page.goto(f"{base_url}{path}")
    assert response is not None and response.status == 200, path
    page.wait_for_load_state("networkidle")
    slug = path.strip("/").replace("/", "-") or "inbox"
    page.screenshot(path=str(SHOTS / f"lists-{slug}-{language}.png"), full_page=True)
    found = page.evaluate(MEASURE)
    assert found["rows"], f"{path} shows no rows"
    wrong = [
        f"{path} ({language}) row {i} is {height}px, more than two lines ({most}px)"
        for i, height, most in found["rows"]
        if height > most
    ]
    if found["width"] > WIDTH:
        wrong.append(f"{path} ({language}) is {found['width']}px wide in a {WIDTH}px window")
    return wrong


@pytest.mark.parametrize("language", ["en", "zh-hans"])
def test_every_list_row_is_at_most_two_lines_and_no_page_overflows(
    browser: Browser, live_server, django_user_model, tenant, language
):
    _every_kind(tenant)
    console_user(django_user_model, tenant, "root", "admin")
    page = browser.new_context(viewport={"width": WIDTH, "height": HEIGHT}).new_page()
    sign_in(page, live_server.url, "root")
    if language != "en":
        page.select_option("#language-switch", language)
        page.click("#language-switch + button")
        expect(page.locator("header.topbar nav")).not_to_contain_text("Inbox")
    wrong = [
        problem
        for path in LIST_PAGES
        for problem in _measure(page, live_server.url, path, language)
    ]
    page.context.close()
    assert wrong == [], "\n".join(wrong)
