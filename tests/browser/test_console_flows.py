"""The console's flows in real Chromium, with and without JavaScript."""

from __future__ import annotations

import hashlib

import pytest
from playwright.sync_api import Page

from ledger.models import ApprovalRequest, IdempotencyRecord, Tenant, Tool
from tests.api.conftest import client_for
from tests.browser.conftest import console_user, shot, sign_in

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


@pytest.fixture
def tenant_with_work() -> tuple[Tenant, object, dict]:
    """A pending conditional replay (with a diff containing HTML) and an unknown call."""
    tenant = Tenant.objects.create(slug="acme", name="Acme")
    api = client_for(tenant)
    api.start_run()
    plan = {
        "workspace": "repo",
        "path": "app.py",
        "before_hash": _sha("a"),
        "after_hash": _sha("b"),
        "diff": "--- a/app.py\n+++ b/app.py\n@@ -1 +1 @@\n-<b>old</b>\n"
        "+<script>alert(1)</script>\n",
    }
    first = api.call("write_file", {"path": "app.py"}, write_plan=plan).json()
    api.post(f"/calls/{first['call_id']}/complete", {"fencing_token": 1, "outcome": "uncertain"})
    replay = api.post(f"/calls/{first['call_id']}/replay", {"current_hash": _sha("a")}).json()
    order = api.call("create_order", {"cart": 1}, business_object_id="c1").json()
    api.post(f"/calls/{order['call_id']}/complete", {"fencing_token": 1, "outcome": "uncertain"})
    return tenant, api, replay


def test_approve_a_conditional_replay_after_opening_its_diff(
    page: Page, live_server, django_user_model, tenant_with_work
) -> None:
    tenant, api, replay = tenant_with_work
    console_user(django_user_model, tenant, "alice", "approver")
    sign_in(page, live_server.url, "alice")
    shot(page, "inbox")
    page.click("text=pending approvals")
    shot(page, "approvals")
    page.click("table.list tbody tr:first-child td:first-child a")
    assert page.locator("pre.diff .add").inner_text() == "+<script>alert(1)</script>"
    shot(page, "approval-detail")
    page.click("button[value=approve]")
    page.wait_for_url(f"{live_server.url}/approvals/")
    assert ApprovalRequest.objects.get().state == "approved"
    started = api.post(f"/calls/{replay['call_id']}/start")
    assert started.status_code == 200 and started.json()["decision"] == "execute"


def test_reject_with_a_reason_the_model_then_receives(
    page: Page, live_server, django_user_model, tenant_with_work
) -> None:
    tenant, api, replay = tenant_with_work
    console_user(django_user_model, tenant, "bob", "approver")
    sign_in(page, live_server.url, "bob")
    page.goto(f"{live_server.url}/approvals/{ApprovalRequest.objects.get().pk}/")
    page.fill("#reason", "This file is owned by the platform team.")
    page.click("button[value=reject]")
    page.wait_for_url(f"{live_server.url}/approvals/")
    observation = api.get(f"/calls/{replay['call_id']}").json()["observation"]
    assert observation["code"] == "APPROVAL_REJECTED" and observation["ok"] is False
    assert "owned by the platform team" in observation["content"]


def test_resolve_an_unknown_call_with_evidence(
    page: Page, live_server, django_user_model, tenant_with_work
) -> None:
    tenant, _api, _replay = tenant_with_work
    console_user(django_user_model, tenant, "olga", "operator")
    sign_in(page, live_server.url, "olga")
    page.click("text=calls with unknown outcome")
    shot(page, "unknown-calls")
    page.click("text=create_order")
    shot(page, "unknown-call-detail")
    page.fill("#note", "Order 991 is in the shop's admin, created once.")
    page.click("button[value=succeeded]")
    page.wait_for_url(f"{live_server.url}/unknown/")
    record = IdempotencyRecord.objects.get(tool__name="create_order")
    assert record.state == "succeeded"


def test_the_flows_work_without_javascript(
    page_without_js: Page, live_server, django_user_model, tenant_with_work
) -> None:
    tenant, _api, _replay = tenant_with_work
    console_user(django_user_model, tenant, "nojs", "admin")  # approves and resolves
    page = page_without_js
    sign_in(page, live_server.url, "nojs")
    page.goto(f"{live_server.url}/approvals/{ApprovalRequest.objects.get().pk}/")
    page.click("button[value=approve]")
    page.wait_for_url(f"{live_server.url}/approvals/")
    assert ApprovalRequest.objects.get().state == "approved"
    record = IdempotencyRecord.objects.get(tool__name="create_order")
    page.goto(f"{live_server.url}/unknown/{record.pk}/")
    page.fill("#note", "No order exists for this cart.")
    page.click("button[value=failed]")
    page.wait_for_url(f"{live_server.url}/unknown/")
    record.refresh_from_db()
    assert record.state == "failed_final"


def test_html_in_tool_names_and_diffs_is_shown_escaped(
    page: Page, live_server, django_user_model, tenant_with_work
) -> None:
    tenant, _api, _replay = tenant_with_work
    Tool.objects.filter(tenant=tenant, name="write_file").update(name="<script>alert(1)</script>")
    console_user(django_user_model, tenant, "eve", "approver")
    alerts: list[str] = []
    page.on("dialog", lambda dialog: (alerts.append(dialog.message), dialog.dismiss()))
    sign_in(page, live_server.url, "eve")
    page.goto(f"{live_server.url}/approvals/")
    assert (
        page.locator("table.list tbody tr:first-child td:first-child a").inner_text()
        == "<script>alert(1)</script>"
    )
    page.click("table.list tbody tr:first-child td:first-child a")
    shot(page, "escaped")
    assert alerts == []
