"""What every drill works with: the stack's addresses, clients for the drill tenants, the
sandbox's own counts, tools that call the sandbox, and a human approver.

Drills talk to the ledger only through the Python client over HTTP. Two things are done in
this process with the ORM because no runtime does them over the API: the set-up (tenants,
tokens, downstream adapters) and the human approver's decision, which in production is a click
in the console.
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx

from agent_ledger_client import CallContext, LedgerClient, ToolError
from drill.report import DrillResult
from drill.stack import Stack

Execute = Callable[[CallContext], Any]
SERVICES = ("orders", "payments", "email", "issues")
#: Tools whose unknown outcomes the workers look up downstream, by idempotency key.
ADAPTERS = {"create_order": "orders", "charge_customer": "payments", "create_ticket": "issues"}


def sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


@dataclass
class Tenant:
    slug: str
    token: str


@dataclass
class DrillContext:
    stack: Stack
    tenant: Tenant
    other_tenant: Tenant
    approver_username: str
    #: How many times each labelled tool function was entered (the runtime side's count).
    executions: dict[str, int] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    # --- the ledger ---------------------------------------------------------------------------
    def client(self, *, token: str | None = None, agent: str = "drill-agent") -> LedgerClient:
        return LedgerClient(
            self.stack.web_url, token or self.tenant.token, agent_id=agent, request_timeout=15
        )

    def wait_records(
        self,
        client: LedgerClient,
        keys: list[str],
        *,
        states: tuple[str, ...] = ("succeeded", "failed_final"),
        timeout: float = 60,
    ) -> dict[str, dict[str, Any] | None]:
        """Poll the ledger until every key's record is in one of ``states`` (or time runs out);
        returns the records as last seen."""
        deadline = time.monotonic() + timeout
        seen: dict[str, dict[str, Any] | None] = {}
        while True:
            seen = {key: client.lookup(key) for key in keys}
            if all(r is not None and r["state"] in states for r in seen.values()):
                return seen
            if time.monotonic() > deadline:
                return seen
            time.sleep(0.5)

    # --- the sandbox --------------------------------------------------------------------------
    def arm(self, **fault: Any) -> None:
        response = httpx.post(f"{self.stack.sandbox_url}/_faults", json=fault, timeout=5)
        response.raise_for_status()

    def clear_faults(self) -> None:
        httpx.delete(f"{self.stack.sandbox_url}/_faults", timeout=5).raise_for_status()

    def stats(self, service: str) -> dict[str, Any]:
        response = httpx.get(f"{self.stack.sandbox_url}/{service}/stats", timeout=5)
        response.raise_for_status()
        data: dict[str, Any] = response.json()
        return data

    def workspace_writes(self, path: str) -> int:
        response = httpx.get(f"{self.stack.sandbox_url}/workspace/stats", timeout=5)
        response.raise_for_status()
        return int(response.json()["writes_per_path"].get(path, 0))

    def put_file(self, path: str, content: str) -> None:
        """Someone (the user, another tool) writes a file in the workspace."""
        httpx.put(
            f"{self.stack.sandbox_url}/workspace/files/{path}",
            json={"content": content},
            timeout=5,
        ).raise_for_status()

    def file_content(self, path: str) -> str | None:
        response = httpx.get(f"{self.stack.sandbox_url}/workspace/files/{path}", timeout=5)
        return str(response.json()["content"]) if response.status_code == 200 else None

    # --- tools the drill agent runs -----------------------------------------------------------
    def count(self, label: str) -> None:
        with self._lock:
            self.executions[label] = self.executions.get(label, 0) + 1

    def ran(self, label: str) -> int:
        return self.executions.get(label, 0)

    def create(
        self,
        service: str,
        label: str,
        *,
        send_key: bool = True,
        timeout: float = 5.0,
        before: Callable[[CallContext], object] | None = None,
        after: Callable[[CallContext], object] | None = None,
    ) -> Execute:
        """A tool that creates one object downstream. Its business reference is the ledger's
        idempotency key, so the sandbox's per-reference count is the number of downstream
        records per key, whether or not the downstream deduplicates (``send_key``)."""

        def execute(ctx: CallContext) -> Any:
            self.count(label)
            if before is not None:
                before(ctx)
            response = httpx.post(
                f"{self.stack.sandbox_url}/{service}/objects",
                json={**ctx.input, "reference": ctx.idempotency_key},
                headers={"Idempotency-Key": ctx.idempotency_key} if send_key else {},
                timeout=timeout,
            )
            if response.status_code >= 500:
                raise ToolError("DOWNSTREAM_UNAVAILABLE", f"{service} said {response.status_code}")
            response.raise_for_status()
            result = response.json()  # a malformed body raises: the outcome is then unknown
            if after is not None:
                after(ctx)
            return result

        return execute

    def write(self, path: str, content: str, label: str, *, timeout: float = 5.0) -> Execute:
        def execute(ctx: CallContext) -> Any:
            self.count(label)
            response = httpx.put(
                f"{self.stack.sandbox_url}/workspace/files/{path}",
                json={"content": content},
                timeout=timeout,
            )
            response.raise_for_status()
            return response.json()

        return execute

    def local(self, label: str, result: Any) -> Execute:
        def execute(ctx: CallContext) -> Any:
            self.count(label)
            return result

        return execute

    # --- a human ------------------------------------------------------------------------------
    def decide(self, key: str, *, approve: bool, reason: str, timeout: float = 20) -> bool:
        """The approver opens the pending request for ``key`` and decides; False if none came."""
        from django.contrib.auth import get_user_model
        from django.db import connections

        from ledger.models import ApprovalRequest
        from ledger.services.approvals import decide

        try:
            user = get_user_model().objects.get(username=self.approver_username)
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:
                pending = ApprovalRequest.objects.filter(
                    tenant__slug=self.tenant.slug, record__key=key, state="pending"
                ).first()
                if pending is not None:
                    decide(approval=pending, user=user, approve=approve, reason=reason)
                    return True
                time.sleep(0.2)
            return False
        finally:
            connections.close_all()

    def decide_later(self, key: str, *, approve: bool, reason: str) -> threading.Thread:
        thread = threading.Thread(
            target=self.decide,
            args=(key,),
            kwargs={"approve": approve, "reason": reason},
            daemon=True,  # an interrupted drill must not keep the process alive
        )
        thread.start()
        return thread

    # --- evidence -----------------------------------------------------------------------------
    def collect(self, client: LedgerClient, result: DrillResult) -> None:
        """Fill in the drill's records, runs and side effects from the ledger and the sandbox."""
        for key in result.idempotency_keys:
            if key in result.records:
                continue  # a snapshot the drill took itself (the record was cleaned up since)
            record = client.lookup(key)
            if record is not None:
                result.records[key] = {
                    "state": record["state"],
                    "executions": record["executions"],
                    "duplicate_hits": record["duplicate_hits"],
                    "tool": record["tool"],
                }
        stats = {service: self.stats(service) for service in SERVICES}
        for key in result.idempotency_keys:
            for service, counts in stats.items():
                objects = int(counts["per_reference"].get(key, 0))
                requests = int(counts["create_requests_per_key"].get(key, 0))
                if objects or requests:
                    result.side_effects.setdefault(key, {})[service] = {
                        "objects": objects,
                        "create_requests": requests,
                    }
        combinations: dict[int, dict[str, Any]] = {}
        for run_id in result.run_ids:
            run = client.request("GET", f"/runs/{run_id}")
            combination = None
            if run["combination_id"]:
                cid = int(run["combination_id"])
                if cid not in combinations:
                    c = client.request("GET", f"/combinations/{cid}")
                    combinations[cid] = {
                        "id": cid,
                        "label": c["label"],
                        "fingerprint": c["fingerprint"],
                        "versions": {
                            f: c[f]
                            for f in ("model", "prompt", "rules", "tool_schema", "data_version")
                        },
                    }
                combination = combinations[cid]
            result.runs[run_id] = {
                "status": run["status"],
                "termination_reason": run["termination_reason"],
                "combination": combination,
            }
            result.termination_reasons[run_id] = run["termination_reason"]
        result.version_combinations = list(combinations.values())
