"""Seed 000's eval cases and seed 001's hard acceptance that need the sandbox downstreams over
real HTTP, or the ledger's own records, through the Python client against a live server. The
cases with a tool of their own (a read retried after its timeout, a permission denied, `ls`
and `npm publish`) are rows of the table both clients run (tests/client/cases/calls.json)."""

from __future__ import annotations

import hashlib
import threading
import time
from typing import Any

import httpx
import pytest
from django.db import connections

from agent_ledger_client import CallContext, LedgerClient
from agent_ledger_client.errors import LedgerRequestError
from ledger.models import ApprovalRequest, IdempotencyRecord, Tenant
from ledger.services.approvals import decide
from sandbox.server import SandboxServer
from tests.factories import make_approver
from tests.sandbox_fixtures import arm

pytestmark = pytest.mark.django_db(transaction=True)


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


class Counter:
    def __init__(self) -> None:
        self.calls = 0


def create_order_tool(sandbox: SandboxServer, counter: Counter, timeout: float = 1.0):
    def execute(ctx: CallContext) -> dict[str, Any]:
        counter.calls += 1
        response = httpx.post(
            f"{sandbox.url}/orders/objects",
            json={"reference": "cart-9"},
            headers={"Idempotency-Key": ctx.idempotency_key},
            timeout=timeout,
        )
        response.raise_for_status()
        return response.json()

    return execute


def test_create_order_timeout_forbids_a_retry(client: LedgerClient, sandbox: SandboxServer) -> None:
    counter = Counter()
    arm(sandbox, service="orders", mode="timeout_after_commit", hang_seconds=2)
    with client.run(user_id="u1") as run:
        first = run.call(
            "create_order",
            {"cart": "cart-9"},
            business_object_id="cart-9",
            execute=create_order_tool(sandbox, counter, timeout=0.5),
        )
        again = run.call(
            "create_order",
            {"cart": "cart-9"},
            business_object_id="cart-9",
            execute=create_order_tool(sandbox, counter),
        )
    assert first["ok"] is False and first["code"] == "SIDE_EFFECT_UNCERTAIN"
    assert first["metadata"]["retryable"] is False
    assert again["code"] == "SIDE_EFFECT_UNCERTAIN" and again["metadata"]["next_action"] == "lookup"
    assert counter.calls == 1
    assert httpx.get(f"{sandbox.url}/orders/stats").json()["objects"] == 1


def _write_tool(sandbox: SandboxServer, path: str, content: str):
    def execute(ctx: CallContext) -> dict[str, Any]:
        response = httpx.put(
            f"{sandbox.url}/workspace/files/{path}", json={"content": content}, timeout=1
        )
        response.raise_for_status()
        return response.json()

    return execute


def _uncertain_write(client: LedgerClient, sandbox: SandboxServer) -> tuple[Any, dict]:
    httpx.put(f"{sandbox.url}/workspace/files/app.py", json={"content": "old"})
    arm(sandbox, service="workspace", mode="reset")  # the write never lands
    run = client.start_run(user_id="u1")
    plan = {
        "workspace": "sandbox",
        "path": "app.py",
        "before_hash": _sha("old"),
        "after_hash": _sha("new"),
        "diff": "-old\n+new\n",
    }
    first = run.call(
        "write_file",
        {"path": "app.py", "content": "new"},
        write_plan=plan,
        execute=_write_tool(sandbox, "app.py", "new"),
    )
    assert first["code"] == "SIDE_EFFECT_UNCERTAIN"
    return run, first


def _approve_when_asked(*, approve: bool = True) -> threading.Thread:
    """A human approver, in another thread, who approves (or rejects) the first pending
    request. It waits up to a minute for one: the request comes after the runtime has started
    its tool server and waited out a hung call, which on a loaded machine takes more than ten
    seconds."""

    def decide_first_pending() -> None:
        try:
            approver = make_approver(Tenant.objects.get(), "approver")
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                pending = ApprovalRequest.objects.filter(state="pending").first()
                if pending is not None:
                    reason = "diff is right" if approve else "not this file"
                    decide(approval=pending, user=approver, approve=approve, reason=reason)
                    return
                time.sleep(0.1)
        finally:
            connections.close_all()

    thread = threading.Thread(target=decide_first_pending, daemon=True)
    thread.start()
    return thread


def test_write_file_with_matching_base_hash_is_replayed_after_approval(
    client: LedgerClient, sandbox: SandboxServer
) -> None:
    _run, first = _uncertain_write(client, sandbox)
    approver = _approve_when_asked()
    observation = client.replay(
        first["metadata"]["call_id"],
        {"path": "app.py", "content": "new"},
        execute=_write_tool(sandbox, "app.py", "new"),
        current_hash=_sha("old"),
        approval_deadline=15,
    )
    approver.join(timeout=15)
    assert observation["ok"] is True, observation
    assert httpx.get(f"{sandbox.url}/workspace/files/app.py").json()["content"] == "new"
    assert ApprovalRequest.objects.get().state == "consumed"
    assert IdempotencyRecord.objects.get().state == "succeeded"


def test_a_replay_with_another_input_runs_nothing(
    client: LedgerClient, sandbox: SandboxServer
) -> None:
    """The ledger checks the input a replay runs: another one is another action, refused
    before the tool is called."""
    _run, first = _uncertain_write(client, sandbox)
    ran: list[Any] = []
    with pytest.raises(LedgerRequestError) as refused:
        client.replay(
            first["metadata"]["call_id"],
            {"path": "app.py", "content": "evil"},
            execute=ran.append,
            current_hash=_sha("old"),
        )
    assert refused.value.status == 422
    assert refused.value.problem["code"] == "IDEMPOTENCY_KEY_CONFLICT"
    assert not ran and not ApprovalRequest.objects.exists()
    assert httpx.get(f"{sandbox.url}/workspace/files/app.py").json()["content"] == "old"


def test_write_file_changed_by_someone_else_is_a_conflict(
    client: LedgerClient, sandbox: SandboxServer
) -> None:
    _run, first = _uncertain_write(client, sandbox)
    httpx.put(f"{sandbox.url}/workspace/files/app.py", json={"content": "theirs"})
    observation = client.replay(
        first["metadata"]["call_id"],
        {"path": "app.py", "content": "new"},
        execute=_write_tool(sandbox, "app.py", "new"),
        current_hash=_sha("theirs"),
    )
    assert observation["code"] == "WRITE_CONFLICT"
    assert not ApprovalRequest.objects.exists()


def test_mcp_create_issue_is_non_idempotent_by_default(client: LedgerClient) -> None:
    tools = client.import_mcp_tools(
        "tracker",
        "untrusted",
        {
            "tools": [
                {
                    "name": "create_issue",
                    "description": "Creates an issue",
                    "inputSchema": {},
                    "annotations": {"readOnlyHint": True, "idempotentHint": True},
                },
            ]
        },
    )
    assert tools[0]["classification"]["idempotency"] == "non_idempotent"
    assert tools[0]["classification"]["replay_policy"] == "never"


def test_hard_acceptance_ten_retries_after_a_timeout_leave_one_record(
    client: LedgerClient, sandbox: SandboxServer
) -> None:
    """Seed 001: after a timeout, ten retries in a row; exactly one record downstream."""
    counter = Counter()
    arm(sandbox, service="orders", mode="timeout_after_commit", hang_seconds=2)
    observations = []
    with client.run(user_id="u1") as run:
        for _ in range(11):  # the first call and ten retries
            observations.append(
                run.call(
                    "create_order",
                    {"cart": "cart-9"},
                    business_object_id="cart-9",
                    execute=create_order_tool(sandbox, counter, timeout=0.5),
                )
            )
    stats = httpx.get(f"{sandbox.url}/orders/stats").json()
    assert stats["objects"] == 1 and stats["max_per_reference"] == 1
    assert counter.calls == 1
    for observation in observations:
        assert observation["ok"] is False
        assert observation["code"] == "SIDE_EFFECT_UNCERTAIN"
        assert observation["content"] and observation["metadata"]["idempotency_key"]
    record = IdempotencyRecord.objects.get()
    assert (record.executions, record.duplicate_hits) == (1, 10)
