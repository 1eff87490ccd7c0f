"""A policy "approve create_order when amount > 100", through the Python client against a live
server and the sandbox's orders over real HTTP: 50 runs at once; 500 waits with the exact call
shown to the approver, runs once after an approval given through the approvals API, and an
order rejected never runs. Side effects are counted at the sandbox."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
import pytest

from agent_ledger_client import CallContext
from sandbox.server import SandboxServer
from tests.client.approving import LARGE_ORDERS, Approver, approver_token, orders

pytestmark = pytest.mark.django_db(transaction=True)


def _order(sandbox: SandboxServer) -> Callable[[CallContext], dict[str, Any]]:
    # No idempotency key: the sandbox makes an order of every request it gets, so it counts
    # every execution and only the ledger stands between an approval and a second order.
    def execute(ctx: CallContext) -> dict[str, Any]:
        response = httpx.post(
            f"{sandbox.url}/orders/objects",
            json={"reference": f"amount-{ctx.input['amount']}"},
            timeout=5,
        )
        response.raise_for_status()
        return response.json()

    return execute


@pytest.fixture
def policy(client: Any) -> dict[str, Any]:
    return client.request("POST", "/approval-policies", json=LARGE_ORDERS)


def test_a_small_order_runs_at_once(client: Any, policy: Any, sandbox: SandboxServer) -> None:
    with client.run(user_id="u1") as run:
        observation = run.call("create_order", {"amount": 50}, execute=_order(sandbox))
    assert observation["ok"] is True, observation
    assert orders(sandbox) == {"amount-50": 1}


def test_a_large_order_waits_shows_the_exact_call_and_runs_once_approved(
    client: Any, policy: Any, sandbox: SandboxServer, live_server: Any
) -> None:
    approver = Approver(live_server.url, approver_token(), approve=True)
    approver.start()
    with client.run(user_id="u1") as run:
        observation = run.call(
            "create_order", {"amount": 500}, execute=_order(sandbox), approval_deadline=25
        )
        again = run.call("create_order", {"amount": 500}, execute=_order(sandbox))
    approver.join(timeout=25)
    assert observation["ok"] is True, observation
    assert observation["metadata"]["replayed"] is False  # it ran: not an answer from the record
    assert again["ok"] is True and again["metadata"]["replayed"] is True
    assert (approver.seen["tool"], approver.seen["input"]) == ("create_order", {"amount": 500})
    assert orders(sandbox) == {"amount-500": 1}


def test_a_rejected_order_never_runs_and_the_model_is_told_why(
    client: Any, policy: Any, sandbox: SandboxServer, live_server: Any
) -> None:
    approver = Approver(
        live_server.url, approver_token(), approve=False, reason="customer asked to wait"
    )
    approver.start()
    with client.run(user_id="u1") as run:
        observation = run.call(
            "create_order", {"amount": 700}, execute=_order(sandbox), approval_deadline=25
        )
        again = run.call("create_order", {"amount": 700}, execute=_order(sandbox))
    approver.join(timeout=25)
    assert observation["code"] == "APPROVAL_REJECTED", observation
    assert "customer asked to wait" in observation["content"]
    assert again["code"] == "APPROVAL_REJECTED"
    assert orders(sandbox) == {}


def test_the_model_is_told_the_policy_when_it_does_not_wait(
    client: Any, policy: Any, sandbox: SandboxServer
) -> None:
    with client.run(user_id="u1") as run:
        observation = run.call(
            "create_order", {"amount": 500}, execute=_order(sandbox), wait_for_approval=False
        )
    assert observation["code"] == "APPROVAL_REQUIRED"
    assert observation["metadata"]["approval_id"]
    assert "orders over 100 need a second look" in observation["content"]
    assert orders(sandbox) == {}
