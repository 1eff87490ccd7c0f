"""``make run`` is a live demo: the same supervisor it runs (``console.demo_stack``) starts the
sandbox, the web server, a worker with beat and the demo agent on an embedded PostgreSQL with
the file-system broker (no Redis), and an unknown call is looked up, settled, and gone from the
operator's screen within a minute, without a reload."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import pytest
from playwright.sync_api import Browser, expect

from console import embedded
from console.demo import DEMO_PASSWORD
from sandbox.process import free_port

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


@pytest.fixture
def stack(tmp_path):
    """The demo stack on free ports, its state under a folder of its own; its URLs and env."""
    # The embedded PostgreSQL runs as a user of its own, who cannot enter pytest's private
    # temporary folders: its state goes to a folder that user may traverse.
    var = Path(tempfile.mkdtemp(prefix="ledger-demo-"))
    var.chmod(0o755)
    env = {**os.environ, "LEDGER_VAR_DIR": str(var)}
    for name in ("DATABASE_URL", "CELERY_BROKER_URL", "DEBUG"):
        env.pop(name, None)  # as on a fresh clone: the embedded defaults
    port, sandbox_port = free_port(), free_port()
    log_path = tmp_path / "stack.log"
    with log_path.open("w") as log:
        ports = ["--port", str(port), "--sandbox-port", str(sandbox_port)]
        process = subprocess.Popen(
            [sys.executable, "-m", "console.demo_stack", *ports, "--runs", "1"],
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


def _token(env: dict[str, str]) -> str:
    done = subprocess.run(
        [sys.executable, "manage.py", "issue_token", "demo", "live-test", "--service-account", "x"],
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
