"""Regression tests for the findings of the first independent review."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from ledger.errors import ApprovalError
from ledger.models import ApprovalRequest, AuditEvent, IdempotencyRecord, LedgerEntry
from ledger.services.approvals import decide
from reconcile.models import WorkspaceRoot
from reconcile.services import reconcile_record
from tests.api.conftest import ApiClient

pytestmark = pytest.mark.django_db


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def _uncertain_write(api: ApiClient, before: str = "old", after: str = "new") -> dict:
    api.start_run()
    plan = {
        "workspace": "repo",
        "path": "app.py",
        "before_hash": _sha(before),
        "after_hash": _sha(after),
        "diff": "-old\n+new\n",
    }
    first = api.call("write_file", {"path": "app.py", "content": after}, write_plan=plan).json()
    api.post(f"/calls/{first['call_id']}/complete", {"fencing_token": 1, "outcome": "uncertain"})
    return first


def test_a_final_failure_reported_late_voids_the_approval(
    api: ApiClient, django_user_model
) -> None:
    first = _uncertain_write(api)
    duplicate = api.call("write_file", {"path": "app.py", "content": "new"}).json()
    assert duplicate["decision"] == "approval_required"
    late = api.post(
        f"/calls/{first['call_id']}/complete",
        {
            "fencing_token": 1,
            "outcome": "failed",
            "error": {"code": "PERMISSION_DENIED", "message": "read-only fs"},
        },
    )
    assert late.status_code == 200
    approval = ApprovalRequest.objects.get()
    assert approval.state == "invalidated"
    approver = django_user_model.objects.create_user("approver", password="pw-123456789")
    with pytest.raises(ApprovalError):
        decide(approval=approval, user=approver, approve=True, reason="ok")
    assert api.post(f"/calls/{duplicate['call_id']}/start").status_code == 409
    assert IdempotencyRecord.objects.get().executions == 1


def test_an_approval_the_worker_requested_can_be_used(
    api: ApiClient,
    tenant,
    tmp_path: Path,
    django_user_model,
) -> None:
    (tmp_path / "app.py").write_text("old")
    WorkspaceRoot.objects.create(tenant=tenant, name="repo", path=str(tmp_path))
    first = _uncertain_write(api)
    record = IdempotencyRecord.objects.get()
    assert reconcile_record(record.pk) == "escalated"
    approval = ApprovalRequest.objects.get()
    approver = django_user_model.objects.create_user("approver", password="pw-123456789")
    decide(approval=approval, user=approver, approve=True, reason="apply again")
    # The runtime (never the worker) re-applies the write: its replay finds the approval.
    replay = api.post(f"/calls/{first['call_id']}/replay", {}).json()
    assert replay["decision"] == "approval_required" and replay["approval_state"] == "approved"
    started = api.post(f"/calls/{replay['call_id']}/start")
    assert started.status_code == 200, started.content
    assert started.json()["lease"]["fencing_token"] == 2
    assert first["idempotency_key"] == started.json()["idempotency_key"]


def test_complete_can_be_repeated_after_a_lost_response(api: ApiClient) -> None:
    api.start_run()
    first = api.call("create_order", {"c": 1}, business_object_id="c1").json()
    body = {"fencing_token": 1, "outcome": "succeeded", "result": {"id": 7}}
    assert api.post(f"/calls/{first['call_id']}/complete", body).status_code == 200
    again = api.post(f"/calls/{first['call_id']}/complete", body)
    assert again.status_code == 200
    assert again.json()["observation"]["content"] == {"id": 7}
    assert AuditEvent.objects.filter(action="record.succeeded").count() == 1


def test_a_refused_completion_is_audited(api: ApiClient) -> None:
    api.start_run()
    first = api.call("read_file", {"p": 1}).json()
    api.post(f"/calls/{first['call_id']}/complete", {"fencing_token": 1, "outcome": "uncertain"})
    api.call("read_file", {"p": 1})  # the automatic replay takes token 2
    stale = api.post(
        f"/calls/{first['call_id']}/complete",
        {"fencing_token": 1, "outcome": "succeeded", "result": {}},
    )
    assert stale.status_code == 409
    assert (
        AuditEvent.objects.filter(action="record.complete_refused", outcome="denied").count() == 1
    )


@pytest.mark.parametrize("agent", ["a" * 101, "bad agent", "<script>"])
def test_a_bad_agent_id_is_a_clear_400(api: ApiClient, agent: str) -> None:
    api.start_run()
    before = LedgerEntry.objects.count()
    response = api.client.post(
        "/api/v1/calls",
        data={"run_id": "run-1", "step_id": "s", "tool": "read_file"},
        content_type="application/json",
        secure=True,
        headers={"Authorization": f"Bearer {api.token}", "X-Agent-Id": agent},
    )
    assert response.status_code == 400 and "X-Agent-Id" in response.json()["detail"]
    assert LedgerEntry.objects.count() == before


def test_a_redacted_recorded_result_says_so(api: ApiClient) -> None:
    api.start_run()
    first = api.call("create_order", {"c": 1}, business_object_id="c1").json()
    api.post(
        f"/calls/{first['call_id']}/complete",
        {"fencing_token": 1, "outcome": "succeeded", "result": {"email": "a@b.co"}},
    )
    again = api.call("create_order", {"c": 1}, business_object_id="c1").json()
    assert again["observation"]["metadata"]["result_redacted"] is True


def test_restricted_errors_keep_their_code(api: ApiClient) -> None:
    api.start_run()
    first = api.call(
        "create_order", {"c": 1}, business_object_id="c1", data_classification="restricted"
    ).json()
    api.post(
        f"/calls/{first['call_id']}/complete",
        {
            "fencing_token": 1,
            "outcome": "failed",
            "error": {"code": "PERMISSION_DENIED", "message": "patient 42"},
        },
    )
    again = api.call(
        "create_order", {"c": 1}, business_object_id="c1", data_classification="restricted"
    ).json()
    assert again["observation"]["code"] == "PERMISSION_DENIED"
    assert "patient 42" not in str(IdempotencyRecord.objects.get().error)
