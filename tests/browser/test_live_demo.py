"""``make run`` is a live demo: the same supervisor it runs (``console.demo_stack``) starts the
sandbox, the web server, a worker with beat and the demo agent on an embedded PostgreSQL with
the file-system broker (no Redis), and an unknown call is looked up, settled, and gone from the
operator's screen within a minute, without a reload. On that demo each role does its day's
work in Chromium at 1440 and 390 px: the manager is told of the candidate's regression (on the
first screen, on the charts, by e-mail to on-call), the approver decides and lands on the next
item while the operator's queue follows each decision, any id pasted in the search box opens
its page, an order is compensated from the console alone, cancelled once, and the admin revokes
a leaked token, refused at once."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest
from playwright.sync_api import Browser, Page, expect

from console import embedded
from console.demo import DEMO_PASSWORD
from sandbox.process import free_port
from tests.browser import axe
from tests.browser.conftest import SHOTS, sign_in

# The whole demo stack and a browser for two minutes: an acceptance run at full size (`make
# drill`). `make test` starts the same embedded demo in tests/test_demo_agent.py.
pytestmark = pytest.mark.scale

ROOT = Path(__file__).resolve().parents[2]
SETTLED_WITHIN_SECONDS = 60


def _wait_for(predicate, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    """The demo stack on free ports, its state under a folder of its own; its URLs, env and
    state folder."""
    # The embedded PostgreSQL runs as a user of its own, who cannot enter pytest's private
    # temporary folders: its state goes to a folder that user may traverse.
    var = Path(tempfile.mkdtemp(prefix="ledger-demo-"))
    var.chmod(0o755)
    env = {**os.environ, "LEDGER_VAR_DIR": str(var)}
    for name in ("DATABASE_URL", "CELERY_BROKER_URL", "DEBUG"):
        env.pop(name, None)  # as on a fresh clone: the embedded defaults
    port, sandbox_port = free_port(), free_port()
    log_path = tmp_path_factory.mktemp("demo") / "stack.log"
    with log_path.open("w") as log:
        ports = ["--port", str(port), "--sandbox-port", str(sandbox_port)]
        process = subprocess.Popen(
            # Three runs a combination: enough writes that did not land for the walk to decide.
            [sys.executable, "-m", "console.demo_stack", *ports, "--runs", "3"],
            cwd=ROOT,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        try:
            _wait_for(
                lambda: "Demo runs done" in log_path.read_text() or process.poll() is not None,
                300,
                "the demo agent",
            )
            assert process.poll() is None, log_path.read_text()[-3000:]
            yield {
                "url": f"http://127.0.0.1:{port}",
                "sandbox": f"http://127.0.0.1:{sandbox_port}",
                "env": {**env, "DEBUG": "true"},
                "log": log_path,
                "var": var,
            }
        finally:
            process.terminate()  # what Ctrl-C does: the supervisor stops every process
            process.wait(timeout=30)
            embedded.stop(var / "pg")
            shutil.rmtree(var, ignore_errors=True)
    leftover = subprocess.run(
        ["pgrep", "-f", f"runserver --noreload 127.0.0.1:{port}"], capture_output=True, check=False
    )
    assert leftover.stdout == b"", "the web server outlived the supervisor"


def _token(env: dict[str, str], name: str = "live-test") -> str:
    done = subprocess.run(
        [sys.executable, "manage.py", "issue_token", "demo", name, "--service-account", "x"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout.strip().splitlines()[-1]


def test_an_unknown_demo_call_settles_on_screen_within_a_minute(browser: Browser, stack) -> None:
    api = httpx.Client(
        base_url=f"{stack['url']}/api/v1",
        headers={"Authorization": f"Bearer {_token(stack['env'])}"},
        timeout=10,
    )
    context = browser.new_context(viewport={"width": 1440, "height": 900})
    page = context.new_page()
    page.goto(f"{stack['url']}/login/")
    page.fill("#id_username", "operator")
    page.fill("#id_password", DEMO_PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_url(f"{stack['url']}/")
    page.goto(f"{stack['url']}/unknown/?tool=create_order")
    page.evaluate("window.notReloaded = true")

    # An order whose response is lost after the downstream created it: unknown to the ledger.
    assert api.post("/runs", json={"run_id": "live-1", "user_id": "u"}).status_code in (200, 201)
    body = {
        "run_id": "live-1",
        "step_id": "order",
        "tool": "create_order",
        "input": {"cart": "live-cart"},
        "business_object_id": "live-cart",
    }
    call = api.post("/calls", json=body).json()
    key = call["idempotency_key"]
    created = httpx.post(
        f"{stack['sandbox']}/orders/objects",
        json={"reference": "live-cart"},
        headers={"Idempotency-Key": key},
        timeout=5,
    )
    assert created.status_code in (200, 201)
    # The first two look-ups meet an outage, so the call is on screen for a while: it is
    # looked up again after a backoff, and found.
    outage = {"mode": "error_5xx", "service": "orders", "operation": "lookup", "count": 2}
    assert httpx.post(f"{stack['sandbox']}/_faults", json=outage, timeout=5).status_code == 201
    done = api.post(
        f"/calls/{call['call_id']}/complete", json={"fencing_token": 1, "outcome": "uncertain"}
    )
    assert done.status_code == 200, done.text
    went_unknown = time.monotonic()

    row = page.locator("#unknown-list tr", has_text="live-cart")
    expect(row).to_have_count(1, timeout=15_000)  # the list polls: the call arrives
    expect(row).to_have_count(0, timeout=SETTLED_WITHIN_SECONDS * 1000)  # and is settled
    settled_after = time.monotonic() - went_unknown
    assert settled_after <= SETTLED_WITHIN_SECONDS
    assert page.evaluate("window.notReloaded") is True  # no reload: the list swapped itself
    page.screenshot(path=str(ROOT / "test-artifacts" / "screenshots" / "live-demo-settled.png"))
    context.close()

    # Settled by the worker as succeeded: a retry now gets the downstream's object back.
    again = api.post("/calls", json={**body, "step_id": "order-retry"}).json()
    assert again["decision"] == "recorded_result", again
    assert "Agent Ledger: http://" in stack["log"].read_text()


#: The widths each role's pages are kept at: a desk and a phone.
WIDTHS = {"1440": {"width": 1440, "height": 900}, "390": {"width": 390, "height": 844}}


def _signed_in(browser: Browser, url: str, role: str, width: str) -> Page:
    page = browser.new_context(viewport=WIDTHS[width]).new_page()
    sign_in(page, url, role, DEMO_PASSWORD)
    return page


def _keep(page: Page, name: str) -> None:
    assert axe.violations(page) == [], name
    overflow = page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
    assert overflow <= 0, f"{name} is {overflow}px wider than the window"
    page.screenshot(path=str(SHOTS / f"live-{name}.png"), full_page=True)


def _waiting_on_an_approver(page: Page) -> list[str]:
    """The unknown calls of the operator's queue whose next step is an approver's decision,
    by their record ids."""
    return page.eval_on_selector_all(
        "#unknown-list tbody tr",
        """rows => rows.filter(r => r.querySelector('.next-step')?.textContent
                                      .includes('An approver decides'))
                       .map(r => r.querySelector('input[name=ids]').value)""",
    )


def test_each_role_does_its_days_work_on_the_demo(browser: Browser, stack) -> None:
    url = stack["url"]
    # The manager: the candidate's regression on the first screen, a line on its chart, and
    # an alert to on-call once the worker has judged the thresholds (every 30 s).
    for width in WIDTHS:
        manager = _signed_in(browser, url, "manager", width)
        expect(manager.locator("#regressions")).to_contain_text("candidate")
        assert manager.locator("#regressions").bounding_box()["y"] < WIDTHS[width]["height"]
        _keep(manager, f"manager-inbox-{width}")
        manager.goto(f"{url}/metrics/")
        limit = manager.locator("#chart-uncertain ul.limits")
        expect(limit).to_contain_text("above 12 over 60 min")
        _wait_for(
            lambda page=manager: (
                "candidate" in (page.reload() and page.locator("#alerts").inner_text())
            ),
            90,
            "the candidate's alert",
        )
        expect(manager.locator("#alerts")).not_to_contain_text("baseline")  # no false alarm
        _keep(manager, f"manager-metrics-{width}")
        manager.context.close()
    mail = "".join(p.read_text() for p in (stack["var"] / "demo-mail").glob("*.log"))
    assert "To: on-call@demo.example" in mail and "candidate" in mail

    # The operator's queue of unknown calls: writes that did not land wait on an approver.
    operator = _signed_in(browser, url, "operator", "390")
    # (once the worker's file check has found each write did not land).
    operator.goto(f"{url}/unknown/")
    _wait_for(
        lambda: operator.reload() and len(_waiting_on_an_approver(operator)) >= 2,
        90,
        "two writes that did not land",
    )
    waiting = _waiting_on_an_approver(operator)
    paths = [
        operator.locator(f"#unknown-list tbody tr:has(#pick-{pk}) td:nth-child(2) .mono")
        .inner_text()
        .strip()
        for pk in waiting
    ]
    _keep(operator, "operator-unknown-390")

    # The approver rejects applying one again (at a desk) and approves another (on a phone),
    # reaching each from its call's page: after each decision the next item opens, with a
    # message naming the call.
    decided = {}
    for record, decision, width in zip(waiting, ("reject", "approve"), WIDTHS, strict=False):
        approver = _signed_in(browser, url, "approver", width)
        approver.goto(f"{url}/ledger/records/{record}/")
        approver.locator("main a[href*='/approvals/']").last.click()
        decided[decision] = urlsplit(approver.url).path
        _keep(approver, f"approver-approval-{width}")
        if decision == "reject":
            approver.fill("#reason", "not this change")
        approver.click(f"button[value={decision}]")
        expect(approver.locator(".messages")).to_contain_text(f"{decision.rstrip('e')}ed")
        assert urlsplit(approver.url).path != decided[decision]  # on the next item
        _keep(approver, f"approver-next-{width}")
        approver.goto(f"{url}{decided[decision]}")
        expect(approver.locator("button[value=approve]")).to_have_count(0)  # no second offer
        approver.context.close()

    # The operator's queue follows: the rejected write is settled as not happened and gone;
    # the approved one, whose run is over, the ledger's worker applies to the file within a
    # beat or two, and it is gone too.
    operator.goto(f"{url}/unknown/")
    expect(operator.locator(f"#pick-{waiting[0]}")).to_have_count(0)
    _wait_for(
        lambda: operator.reload() and operator.locator(f"#pick-{waiting[1]}").count() == 0,
        90,
        "the worker to apply the approved write",
    )
    _keep(operator, "operator-unknown-after-390")
    operator.goto(f"{url}/ledger/records/{waiting[1]}/")
    expect(operator.locator("main")).to_contain_text("Applied by the ledger's worker")
    written = (stack["var"] / "workspaces" / "demo" / paths[1]).read_text()
    assert written.startswith("retries: ") and int(written.split()[1]) >= 3, written
    operator.context.close()

    # Any id pasted in the search box opens its page: a run, and an order id that only the
    # downstream's answer holds.
    orders = httpx.get(f"{stack['sandbox']}/orders/objects", timeout=5).json()["objects"]
    for width in WIDTHS:
        operator = _signed_in(browser, url, "operator", width)
        operator.goto(f"{url}/ledger/runs/")
        run_path = urlsplit(
            operator.locator("table.list tbody a[href*='/ledger/runs/']").first.get_attribute(
                "href"
            )
        ).path
        run_id = operator.locator("table.list tbody [data-copy]").first.get_attribute("data-copy")
        box = operator.locator("header.topbar form[role=search] input[name=id]")
        for text, page in [(run_id, run_path), (orders[0]["id"], "/ledger/records/")]:
            box.fill(text)
            box.press("Enter")
            operator.wait_for_url(re.compile(re.escape(page)))
        _keep(operator, f"operator-found-order-{width}")
        operator.context.close()

    # A demo order that should not have happened is compensated from the console alone: the
    # manager finds create_order's compensation on the Tools page (make run sets it up there,
    # no /admin/), the operator asks for it with a reason, the approver approves it, and the
    # worker cancels the sandbox's order once.
    manager = _signed_in(browser, url, "manager", "1440")
    manager.goto(f"{url}/tools/?compensation=create_order#compensation-form")
    assert manager.input_value("#comp-compensating_tool") == "cancel_order"
    assert manager.input_value("#comp-url_template").endswith("/orders/objects/{order_id}/cancel")
    _keep(manager, "manager-compensation-1440")
    manager.context.close()
    cancelled = httpx.get(f"{stack['sandbox']}/orders/stats", timeout=5).json()
    order = next(o["id"] for o in orders if o["id"] not in cancelled["cancellations_per_object"])
    operator = _signed_in(browser, url, "operator", "390")
    box = operator.locator("header.topbar form[role=search] input[name=id]")
    box.fill(order)
    box.press("Enter")
    operator.wait_for_url(re.compile("/ledger/records/"))
    operator.click("main a[href^='/compensations/records/']")
    operator.fill("#request-reason", "the customer cancelled the cart")
    operator.click("form[action$='/request'] button[type=submit]")
    expect(operator.locator("#compensation-state")).to_have_count(1)
    _keep(operator, "operator-compensation-requested-390")
    operator.context.close()
    approver = _signed_in(browser, url, "approver", "390")
    approver.goto(f"{url}/approvals/")
    approver.locator("main table.list tbody tr", has_text="cancel_order").locator("a").first.click()
    expect(approver.locator("main")).to_contain_text("the customer cancelled the cart")
    _keep(approver, "approver-compensation-390")
    approver.fill("#reason", "the customer asked")
    approver.click("button[value=approve]")
    approver.context.close()
    _wait_for(
        lambda: (
            httpx.get(f"{stack['sandbox']}/orders/stats", timeout=5)
            .json()["cancellations_per_object"]
            .get(order)
            == 1
        ),
        60,
        "the worker to cancel the order",
    )
    stats = httpx.get(f"{stack['sandbox']}/orders/stats", timeout=5).json()
    assert stats["cancellations_per_object"] == {**cancelled["cancellations_per_object"], order: 1}

    # The admin: a runtime's token has leaked; revoked on the phone, it is refused at once.
    leaked = _token(stack["env"], "leaked-runtime")
    runtime = httpx.Client(
        base_url=f"{url}/api/v1", headers={"Authorization": f"Bearer {leaked}"}, timeout=10
    )
    assert runtime.get("/tools").status_code == 200
    admin = _signed_in(browser, url, "admin", "390")
    admin.goto(f"{url}/tokens/")
    row = admin.locator("main table.list tbody tr", has_text="leaked-runtime")
    row.locator("input[name=reason]").fill("pasted in a public issue")
    row.locator("button[type=submit]").click()
    expect(admin.locator("main table.list tbody tr", has_text="leaked-runtime")).to_contain_text(
        "revoked"
    )
    _keep(admin, "admin-tokens-390")
    admin.context.close()
    assert runtime.get("/tools").status_code == 401
