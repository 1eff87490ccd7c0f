"""A policy on a write's path: a write under ``prod/`` waits for an approver, who sees its
dry-run diff, and runs nothing until approved; a write elsewhere runs at once."""

from __future__ import annotations

import hashlib

import pytest

from ledger.models import ApprovalRequest, IdempotencyRecord, Tenant
from ledger.services import approval_policies
from tests.api.conftest import ApiClient

pytestmark = pytest.mark.django_db


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def _write(api: ApiClient, path: str) -> dict:
    plan = {
        "workspace": "repo",
        "path": path,
        "before_hash": _sha("old"),
        "after_hash": _sha("new"),
        "diff": f"--- a/{path}\n+++ b/{path}\n-old\n+new\n",
    }
    return api.call("write_file", {"path": path, "content": "new"}, write_plan=plan).json()


def test_a_write_under_a_prefix_waits_with_its_diff_and_others_run(
    api: ApiClient, tenant: Tenant
) -> None:
    approval_policies.add_policy(
        tenant=tenant,
        actor="mia",
        source="api",
        name="production",
        reason="production config changes are reviewed",
        write_prefix="prod/",
    )
    api.start_run()
    elsewhere = _write(api, "dev/app.yaml")
    assert elsewhere["decision"] == "execute"
    asked = _write(api, "prod/app.yaml")
    assert asked["decision"] == "approval_required", asked
    assert "production config changes are reviewed" in asked["observation"]["content"]
    record = IdempotencyRecord.objects.get(key=asked["idempotency_key"])
    assert (record.state, record.executions) == ("reserved", 0)
    detail = api.get(f"/approvals/{asked['approval_id']}").json()
    assert (
        detail["write_plan"]["path"] == "prod/app.yaml" and "+new" in detail["write_plan"]["diff"]
    )
    not_yet = api.post(f"/calls/{asked['call_id']}/start")
    assert not_yet.status_code == 409
    assert ApprovalRequest.objects.get(pk=asked["approval_id"]).state == "pending"
