"""Every console page in real Chromium at desktop width (screenshots kept as artifacts), plus
the flows not covered in test_console_flows: rollback, bulk actions, keyboard,
and the Chinese console."""

from __future__ import annotations

import pytest
from playwright.sync_api import Page, expect

from ledger.models import ApprovalRequest, AuditEvent, IdempotencyRecord, Run, VersionCombination
from tests.browser.conftest import console_user, shot, sign_in
from tests.console.conftest import make_pending

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

# Form controls a screen reader could not name: no <label for>, no wrapping label, no aria-label.
UNLABELLED_CONTROLS = """
[...document.querySelectorAll('input:not([type=hidden]), select, textarea, button')]
  .filter(el => !el.hidden && !(el.labels && el.labels.length) && !el.getAttribute('aria-label')
                && !(el.tagName === 'BUTTON' && el.textContent.trim()))
  .map(el => el.outerHTML.slice(0, 80))
"""


def test_roll_back_a_combination(page: Page, live_server, django_user_model, incident) -> None:
    tenant, api, good, bad = incident
    console_user(django_user_model, tenant, "maria", "manager")
    sign_in(page, live_server.url, "maria")
    page.click("nav >> text=Combinations")
    shot(page, "combinations")
    row = page.locator("tr", has_text="prompt-v2")
    row.locator("details.row-menu > summary").click()
    row.locator("text=Roll back…").click()
    # The confirmation lists the in-flight runs and the pending side effects before anything.
    expect(page.locator("h1")).to_contain_text("Roll back prompt-v2")
    expect(page.locator("text=run-checkout")).to_be_visible()
    unknown = IdempotencyRecord.objects.filter(combination_id=bad["id"], state="unknown").count()
    assert unknown == 4  # three orders and the write waiting for approval
    # Nothing can look them up (no adapter for the orders, the write's workspace unregistered).
    expect(page.locator("#rollback-lookups h2")).to_have_text(
        "0 unknown calls will be queued for look-up"
    )
    expect(page.locator("#rollback-needs-human h2")).to_have_text(f"Needs a human ({unknown})")
    approvals = page.locator("#rollback-approvals")
    expect(approvals.locator("h2")).to_have_text("1 approval will be invalidated")
    expect(approvals.locator(".badge")).to_have_text(["pending"])
    shot(page, "rollback-preview")
    assert VersionCombination.objects.get(pk=bad["id"]).state == "active"
    page.fill("#reason", "Duplicate orders since prompt-v2")
    page.click("text=Roll back now")
    expect(page.locator("h1")).to_contain_text("Rolled back prompt-v2")
    expect(approvals.locator("h2")).to_have_text("1 approval invalidated")
    expect(approvals.locator(".badge")).to_have_text(["invalidated"])  # no longer pending
    expect(page.locator("#rollback-runs .badge")).to_have_text(["halted", "halted"])
    shot(page, "rollback-result")
    assert VersionCombination.objects.get(pk=bad["id"]).state == "halted"
    assert VersionCombination.objects.get(pk=good["id"]).state == "active"
    assert Run.objects.get(run_id="run-checkout").status == "halted"
    api.start_run("run-after")
    assert Run.objects.get(run_id="run-after").combination_id == good["id"]


def test_bulk_look_up_with_select_all(page: Page, live_server, django_user_model, incident):
    tenant, *_ = incident
    console_user(django_user_model, tenant, "olga", "operator")
    sign_in(page, live_server.url, "olga")
    escalated = IdempotencyRecord.objects.filter(escalated_at__isnull=False)
    before = set(escalated.values_list("pk", "escalated_at", "escalation_reason"))
    page.goto(f"{live_server.url}/unknown/")
    page.check("[data-select-all]")
    page.select_option("#bulk-action", "escalate")
    page.fill("#bulk-note", "Shop API is down; checking by hand")
    page.click("text=Review…")
    expect(page.locator("text=Dry run: nothing has changed")).to_be_visible()
    shot(page, "unknown-bulk-preview")
    assert set(escalated.values_list("pk", "escalated_at", "escalation_reason")) == before
    page.click("text=Confirm for 4 calls")
    expect(page.locator(".messages")).to_contain_text("done for 4 of 4 selected calls")
    assert escalated.filter(escalation_reason="Shop API is down; checking by hand").count() == 4


def test_keyboard_walks_the_queue_and_approves(
    page: Page, live_server, django_user_model, incident
) -> None:
    tenant, *_ = incident
    make_pending(tenant, "second.py", run_id="run-review-2")
    first, second = ApprovalRequest.objects.order_by("created_at", "pk")
    console_user(django_user_model, tenant, "alice", "approver")
    sign_in(page, live_server.url, "alice")
    page.goto(f"{live_server.url}/approvals/")
    page.keyboard.press("j")
    page.keyboard.press("j")
    expect(page.locator("tr.selected")).to_contain_text("write_file")
    assert page.locator("tbody tr").nth(1).get_attribute("aria-selected") == "true"
    page.keyboard.press("o")
    page.wait_for_url(f"{live_server.url}/approvals/{second.pk}/")
    page.keyboard.press("k")
    page.wait_for_url(f"{live_server.url}/approvals/{first.pk}/")
    page.keyboard.press("a")
    assert page.evaluate("document.activeElement.value") == "approve"
    assert ApprovalRequest.objects.get(pk=first.pk).state == "pending"  # a key alone is not enough
    page.keyboard.press("Enter")
    # Decided, the approver is on the queue's next approval, told what was decided.
    page.wait_for_url(f"{live_server.url}/approvals/{second.pk}/")
    expect(page.locator(".messages")).to_contain_text("approved")
    assert ApprovalRequest.objects.get(pk=first.pk).state == "approved"
    page.keyboard.press("r")
    page.keyboard.type("Not during the freeze")
    page.keyboard.press("Control+Enter")
    page.wait_for_url(f"{live_server.url}/approvals/")  # the last one: back to the queue
    rejected = ApprovalRequest.objects.get(pk=second.pk)
    assert rejected.state == "rejected" and rejected.decision_reason == "Not during the freeze"


def test_every_page_at_desktop_width(page: Page, live_server, django_user_model, incident):
    tenant, _api, _good, bad = incident
    console_user(django_user_model, tenant, "root", "admin")
    errors: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.on("response", lambda r: errors.append(f"{r.status} {r.url}") if r.status >= 400 else None)
    page.goto(f"{live_server.url}/login/")
    shot(page, "login")
    sign_in(page, live_server.url, "root")
    run = Run.objects.get(run_id="run-checkout")
    unknown = IdempotencyRecord.objects.filter(state="unknown").first()
    approval = ApprovalRequest.objects.get()
    pages = {
        "inbox": "/",
        "approvals": "/approvals/",
        "approval-detail": f"/approvals/{approval.pk}/",
        "unknown-calls": "/unknown/",
        "unknown-call-detail": f"/unknown/{unknown.pk}/",
        "ledger-calls": "/ledger/",
        "ledger-runs": "/ledger/runs/",
        "run-timeline": f"/ledger/runs/{run.pk}/",
        "combinations": "/combinations/",
        "rollback-preview": f"/combinations/{bad['id']}/rollback",
        "metrics": "/metrics/",
        "tools": "/tools/",
        "audit": "/audit/",
        "record": f"/ledger/records/{unknown.pk}/",
        "combination": f"/combinations/{bad['id']}/",
        "audit-event": f"/audit/{AuditEvent.objects.filter(tenant=tenant).last().pk}/",
    }
    for name, path in pages.items():
        response = page.goto(f"{live_server.url}{path}")
        assert response is not None and response.status == 200, path
        assert page.locator("h1").count() == 1, path
        page.wait_for_load_state("networkidle")
        assert page.evaluate(UNLABELLED_CONTROLS) == [], path
        # Nothing sticks out of the window: the top bar wraps between its links instead.
        assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth"), path
        shot(page, f"page-{name}")
    assert errors == []
    page.select_option("#language-switch", "zh-hans")
    page.click("#language-switch + button")
    expect(page.locator("nav[aria-label]")).to_contain_text("收件箱")
    page.goto(f"{live_server.url}/")
    shot(page, "page-inbox-zh-hans")
    page.goto(f"{live_server.url}/ledger/runs/{run.pk}/")
    shot(page, "page-run-timeline-zh-hans")
