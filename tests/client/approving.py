"""What the approval tests share: the policy "approve create_order when amount > 100", a person
with the approver role and a token of their own, and the orders counted at the sandbox by
reference (``amount-500``)."""

from __future__ import annotations

import threading
import time
from typing import Any

import httpx
from django.contrib.auth import get_user_model
from django.db import connections

from agent_ledger_client import LedgerClient
from ledger.models import ApiToken, Tenant
from sandbox.server import SandboxServer
from tests.console.conftest import make_user

LARGE_ORDERS = {
    "name": "large orders",
    "reason": "orders over 100 need a second look",
    "tool": "create_order",
    "path": "amount",
    "operator": "gt",
    "value": 100,
}


def large_orders_policy(url: str, token: str) -> dict[str, Any]:
    """The policy, made through the API with the runtime's token."""
    with LedgerClient(url, token) as ledger:
        return ledger.request("POST", "/approval-policies", json=LARGE_ORDERS)


def approver_token(name: str = "bob") -> str:
    """A token of a person with the approver role in the tenant (none of the action's
    principals)."""
    tenant = Tenant.objects.get()
    user = make_user(get_user_model(), name, tenant, "approver")
    return ApiToken.issue(tenant=tenant, name=f"{name}-laptop", user=user)[1]


def orders(sandbox: SandboxServer) -> dict[str, int]:
    """The orders the sandbox made, by reference."""
    return httpx.get(f"{sandbox.url}/orders/stats").json()["per_reference"]


class Approver(threading.Thread):
    """A person with the approver role, deciding the first open request through the API
    ``after`` seconds spent reading it; ``seen`` keeps what the request showed."""

    def __init__(
        self, url: str, token: str, *, approve: bool, reason: str = "", after: float = 0.0
    ) -> None:
        super().__init__(daemon=True)
        self.url, self.token, self.approve, self.reason = url, token, approve, reason
        self.after = after
        self.seen: dict[str, Any] = {}

    def run(self) -> None:
        try:
            with LedgerClient(self.url, self.token) as ledger:
                deadline = time.monotonic() + 20
                while time.monotonic() < deadline and not self.seen:
                    waiting = ledger.approvals()
                    if waiting:
                        self.seen = ledger.approval(waiting[0]["id"])
                        time.sleep(self.after)
                        ledger.decide_approval(
                            self.seen["id"], approve=self.approve, reason=self.reason
                        )
                    time.sleep(0.1)
        finally:
            connections.close_all()
