"""``client.replay`` waits for the approval it asked for, against a live ledger: an order that
failed without effect is put to a human when replayed; the approver decides about a second
later, from another thread, through the approvals API. Orders are counted at the sandbox."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
import pytest

from agent_ledger_client import CallContext, ToolError
from sandbox.server import SandboxServer
from tests.client.approving import Approver, approver_token, orders
from tests.sandbox_fixtures import arm

pytestmark = pytest.mark.django_db(transaction=True)
#: How long the approver reads the request before deciding.
READING = 1.0


def _order(sandbox: SandboxServer) -> Callable[[CallContext], dict[str, Any]]:
    """``create_order`` at the sandbox; a 5xx is a failure without effect (retryable)."""

    def execute(ctx: CallContext) -> dict[str, Any]:
        response = httpx.post(
            f"{sandbox.url}/orders/objects", json={"reference": ctx.input["cart"]}, timeout=5
        )
        if response.status_code >= 500:
            raise ToolError("ORDERS_UNAVAILABLE", "the order service is down", retryable=True)
        response.raise_for_status()
        return response.json()

    return execute


def _failed_order(client: Any, sandbox: SandboxServer) -> dict[str, Any]:
    """An order whose service answered 503 before doing anything: the call failed, retryable,
    and nothing was ordered."""
    arm(sandbox, service="orders", mode="error_5xx", count=1)
    with client.run(user_id="u1") as run:
        failed = run.call("create_order", {"cart": "cart-9"}, execute=_order(sandbox))
    assert failed["code"] == "ORDERS_UNAVAILABLE" and failed["metadata"]["retryable"], failed
    assert orders(sandbox) == {}
    return failed


def test_a_replay_waits_for_its_approval_and_runs_once_approved(
    client: Any, sandbox: SandboxServer, live_server: Any
) -> None:
    failed = _failed_order(client, sandbox)
    approver = Approver(live_server.url, approver_token(), approve=True, after=READING)
    approver.start()
    replayed = client.replay(
        failed["metadata"]["call_id"],
        {"cart": "cart-9"},
        execute=_order(sandbox),
        approval_deadline=25,
    )
    approver.join(timeout=25)
    assert replayed["ok"] is True, replayed
    assert replayed["content"]["reference"] == "cart-9"
    assert (approver.seen["tool"], approver.seen["input"]) == ("create_order", {"cart": "cart-9"})
    assert orders(sandbox) == {"cart-9": 1}


def test_a_rejected_replay_runs_nothing_and_says_why(
    client: Any, sandbox: SandboxServer, live_server: Any
) -> None:
    failed = _failed_order(client, sandbox)
    approver = Approver(
        live_server.url,
        approver_token(),
        approve=False,
        reason="the customer cancelled",
        after=READING,
    )
    approver.start()
    replayed = client.replay(
        failed["metadata"]["call_id"],
        {"cart": "cart-9"},
        execute=_order(sandbox),
        approval_deadline=25,
    )
    approver.join(timeout=25)
    assert replayed["code"] == "APPROVAL_REJECTED", replayed
    assert "the customer cancelled" in replayed["content"]
    assert approver.seen and orders(sandbox) == {}
