"""A conditional write whose file someone else changed: the scenario of the write-conflict
tests, in a registered workspace with a real file."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

from ledger.models import IdempotencyRecord, Tenant, WorkspaceRoot
from tests.api.conftest import ApiClient, client_for

REST = "mode: fast\nlog: info\nport: 80\n"
BEFORE = f"name: shop\nretries: 0\n{REST}timeout: 5\n"
AFTER = f"name: shop\nretries: 3\n{REST}timeout: 5\n"
DIFF = (
    "--- a/config/app.yaml\n+++ b/config/app.yaml\n@@ -1,3 +1,3 @@\n name: shop\n"
    "-retries: 0\n+retries: 3\n mode: fast\n"
)
#: Someone else changed a line the plan does not touch: the plan still applies.
ELSEWHERE = f"name: shop\nretries: 0\n{REST}timeout: 30\n"
#: Someone else changed the line the plan changes: it no longer applies.
SAME_LINE = f"name: shop\nretries: 9\n{REST}timeout: 5\n"


def sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def workspace_file(tenant: Tenant, root: Path) -> Path:
    """``root`` registered as the tenant's workspace "repo"; the path of the plan's file in it."""
    WorkspaceRoot.objects.create(tenant=tenant, name="repo", path=str(root))
    (root / "config").mkdir()
    return root / "config" / "app.yaml"


def lost_write(tenant: Tenant, **extra: Any) -> tuple[ApiClient, dict[str, Any]]:
    """A conditional write whose response was lost: its record is unknown."""
    api = client_for(tenant)
    api.start_run("run-1")
    plan = {
        "workspace": "repo",
        "path": "config/app.yaml",
        "before_hash": sha(BEFORE),
        "after_hash": sha(AFTER),
        "diff": DIFF,
    }
    first = api.call("write_file", {"path": "config/app.yaml"}, write_plan=plan, **extra).json()
    api.post(f"/calls/{first['call_id']}/complete", {"fencing_token": 1, "outcome": "uncertain"})
    return api, first


def replay_conflict(tenant: Tenant, workspace: Path, now: str, **extra: Any) -> IdempotencyRecord:
    """The runtime's replay reports the file's hash now, neither the plan's before nor after:
    the record is escalated as a write conflict, with only that hash to go on."""
    workspace.write_text(now)
    api, first = lost_write(tenant, **extra)
    api.post(f"/calls/{first['call_id']}/replay", {"current_hash": sha(now)})
    record = IdempotencyRecord.objects.get(key=first["idempotency_key"])
    assert record.escalation_kind == "write_conflict", record.escalation_reason
    return record
