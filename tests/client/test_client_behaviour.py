"""The client's own guarantees: fail closed, back off, async parity, no Django needed."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from agent_ledger_client import AsyncLedgerClient, CallContext, LedgerClient

pytestmark = pytest.mark.django_db(transaction=True)
ROOT = Path(__file__).resolve().parents[2]


def test_client_imports_without_django() -> None:
    code = "import sys, agent_ledger_client; print('django' in sys.modules)"
    result = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
        env={"PATH": "/usr/bin:/bin"},
    )
    assert result.stdout.strip() == "False"


def test_unreachable_ledger_fails_closed_for_side_effects() -> None:
    executed: list[str] = []
    with LedgerClient("http://127.0.0.1:9", "al_x", request_timeout=0.5) as client:
        blocked = client.call(
            "run-1", "charge_customer", {"amount": 5}, execute=lambda ctx: executed.append("charge")
        )
        allowed = client.call(
            "run-1",
            "read_file",
            {"path": "a"},
            execute=lambda ctx: executed.append("read") or "text",
        )
    assert blocked["ok"] is False and blocked["code"] == "LEDGER_UNAVAILABLE"
    assert "NOT executed" in blocked["content"]
    assert allowed["ok"] is True and allowed["content"] == "text"
    assert executed == ["read"]


def test_a_second_caller_waits_then_gets_the_recorded_result(client: LedgerClient) -> None:
    run = client.start_run(user_id="u1")
    release = threading.Event()
    results: dict[str, Any] = {}

    def slow(ctx: CallContext) -> dict[str, str]:
        release.wait(5)
        return {"order": "o-1"}

    first = threading.Thread(
        target=lambda: results.setdefault(
            "first", run.call("create_order", {"c": 1}, business_object_id="c1", execute=slow)
        )
    )
    first.start()
    time.sleep(0.5)
    threading.Timer(1.0, release.set).start()
    second = run.call(
        "create_order",
        {"c": 1},
        business_object_id="c1",
        execute=lambda ctx: pytest.fail("must not execute twice"),
        wait_deadline=10,
    )
    first.join(10)
    assert results["first"]["ok"] is True
    assert second["ok"] is True and second["metadata"]["replayed"] is True
    assert second["content"] == {"order": "o-1"}


def test_async_client_runs_the_same_protocol(live_server, ledger_token: str) -> None:
    calls = 0

    async def create(ctx: CallContext) -> dict[str, str]:
        nonlocal calls
        calls += 1
        raise httpx.ReadTimeout("downstream timed out")

    async def scenario() -> tuple[dict, dict]:
        async with AsyncLedgerClient(live_server.url, ledger_token) as client:
            run = await client.start_run(user_id="u1")
            first = await run.call(
                "send_email", {"to": "x"}, execute=create, business_object_id="mail-1"
            )
            again = await run.call(
                "send_email", {"to": "x"}, execute=create, business_object_id="mail-1"
            )
            await run.finish("completed")
            return first, again

    first, again = asyncio.run(scenario())
    assert first["code"] == again["code"] == "SIDE_EFFECT_UNCERTAIN"
    assert calls == 1


def test_reading_again_reads_again_but_a_retry_is_deduplicated(client: LedgerClient) -> None:
    reads = iter(["old", "new", "newer"])
    with client.run(user_id="u1") as run:
        first = run.call("read_file", {"path": "a"}, execute=lambda ctx: next(reads))
        second = run.call("read_file", {"path": "a"}, execute=lambda ctx: next(reads))
        retry = run.call(
            "read_file",
            {"path": "a"},
            execute=lambda ctx: next(reads),
            step_id=second["metadata"]["call_id"] and "fixed",
        )
        retry_again = run.call(
            "read_file", {"path": "a"}, execute=lambda ctx: next(reads), step_id="fixed"
        )
    assert (first["content"], second["content"]) == ("old", "new")
    assert retry["content"] == "newer" and retry_again["content"] == "newer"
    assert retry_again["metadata"]["replayed"] is True
