"""A write conflict's page in real Chromium, at 1440 px and a phone's 390 px, in English and
简体中文: the file as the worker read it, the plan's diff beside it and the change applying it
now would make, each readable on the screen (screenshots write-conflict-*.png)."""

from __future__ import annotations

from pathlib import Path

import pytest
from playwright.sync_api import Page, expect

from console.models import Preferences
from reconcile.tasks import snapshot_write_conflicts
from tests.browser.conftest import console_user, shot, sign_in
from tests.write_conflicts import ELSEWHERE, replay_conflict, workspace_file

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def test_the_operator_reads_the_conflicting_file_and_the_plan_at_any_width(
    live_server, page: Page, django_user_model, tenant, tmp_path: Path
) -> None:
    record = replay_conflict(tenant, workspace_file(tenant, tmp_path), ELSEWHERE)
    snapshot_write_conflicts()
    for language in ("en", "zh-hans"):
        user = console_user(django_user_model, tenant, f"olga-{language}", "operator")
        Preferences.objects.create(user=user, language=language)
        page.context.clear_cookies()
        sign_in(page, live_server.url, user.username)
        expect(page.locator("html")).to_have_attribute("lang", language)
        for width, height in ((1440, 900), (390, 844)):
            page.set_viewport_size({"width": width, "height": height})
            page.goto(f"{live_server.url}/unknown/{record.pk}/")
            card = page.locator("#file-now")
            expect(card).to_be_visible()
            # The change the plan would make now, coloured by line; the other edit is not in it.
            expect(card.locator("pre.diff .line.add")).to_have_text("+retries: 3")
            expect(card.locator("pre.diff .line.del")).to_have_text("-retries: 0")
            wider = page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
            assert wider <= 1, f"{width}px: the page is {wider}px wider than the window"
            shot(page, f"write-conflict-{width}-{language}")
