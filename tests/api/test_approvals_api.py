"""The approvals API: list what waits, read a request with its exact action and diff, decide it
with a reason, under the console's rules (a person with the approver role, none of the action's
principals, once)."""

from __future__ import annotations

import hashlib
from typing import Any

import pytest
from django.contrib.auth import get_user_model

from ledger.models import ApiToken, ApprovalRequest, AuditEvent, IdempotencyRecord, Tenant
from ledger.services import approval_policies
from tests.api.conftest import ApiClient, client_for
from tests.console.conftest import make_user

pytestmark = pytest.mark.django_db


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def _person(tenant: Tenant, name: str, role: str) -> ApiClient:
    user = make_user(get_user_model(), name, tenant, role)
    return ApiClient(tenant, ApiToken.issue(tenant=tenant, name=f"{name}-laptop", user=user)[1])


def _waiting(runtime: ApiClient, path: str = "app.py") -> dict[str, Any]:
    """A lost write whose replay waits for an approver; the replay's answer."""
    runtime.start_run(f"run-{path}")
    plan = {
        "workspace": "repo",
        "path": path,
        "before_hash": _sha("old"),
        "after_hash": _sha("new"),
        "diff": "-old\n+<b>new</b>\n",
    }
    first = runtime.call(
        "write_file", {"path": path, "content": "new"}, write_plan=plan, run_id=f"run-{path}"
    ).json()
    runtime.post(
        f"/calls/{first['call_id']}/complete", {"fencing_token": 1, "outcome": "uncertain"}
    )
    replay = runtime.post(f"/calls/{first['call_id']}/replay", {"current_hash": _sha("old")})
    assert replay.json()["decision"] == "approval_required", replay.content
    return replay.json()


def test_an_approver_lists_reads_and_approves_and_the_call_runs_once(tenant: Tenant) -> None:
    runtime = client_for(tenant)
    replay = _waiting(runtime)
    approver = _person(tenant, "bob", "approver")
    listed = approver.get("/approvals").json()
    assert [a["id"] for a in listed] == [replay["approval_id"]]
    assert listed[0]["open"] and listed[0]["write_plan"] is None
    detail = approver.get(f"/approvals/{replay['approval_id']}").json()
    assert detail["tool"] == "write_file" and detail["input"] == {
        "path": "app.py",
        "content": "new",
    }
    assert detail["write_plan"]["diff"] == "-old\n+<b>new</b>\n"
    decided = approver.post(f"/approvals/{replay['approval_id']}/decide", {"decision": "approve"})
    assert decided.status_code == 200, decided.content
    assert (decided.json()["state"], decided.json()["decided_by"]) == ("approved", "bob")
    started = runtime.post(f"/calls/{replay['call_id']}/start")
    assert started.status_code == 200, started.content
    again = runtime.post(f"/calls/{replay['call_id']}/start")
    assert again.status_code == 409  # the approval is used up
    record = IdempotencyRecord.objects.get(key=replay["idempotency_key"])
    assert record.executions == 2  # the lost first run and the one approved replay
    assert approver.get("/approvals").json() == []


def test_a_rejection_reaches_the_model_with_its_reason(tenant: Tenant) -> None:
    runtime = client_for(tenant)
    replay = _waiting(runtime)
    approver = _person(tenant, "bob", "approver")
    without = approver.post(f"/approvals/{replay['approval_id']}/decide", {"decision": "reject"})
    assert without.status_code == 400 and "reason" in without.json()["detail"]
    rejected = approver.post(
        f"/approvals/{replay['approval_id']}/decide",
        {"decision": "reject", "reason": "not during the freeze"},
    )
    assert rejected.json()["state"] == "rejected"
    told = runtime.get(f"/calls/{replay['call_id']}").json()["observation"]
    assert told["code"] == "APPROVAL_REJECTED" and "not during the freeze" in told["content"]


def test_the_requesters_own_token_is_refused_and_audited(tenant: Tenant) -> None:
    alice = _person(tenant, "alice", "approver")
    replay = _waiting(alice)
    refused = alice.post(f"/approvals/{replay['approval_id']}/decide", {"decision": "approve"})
    assert refused.status_code == 403, refused.content
    assert "their own request" in refused.json()["detail"]
    assert ApprovalRequest.objects.get().state == "pending"
    event = AuditEvent.objects.get(action="approval.decide_refused")
    assert (event.actor, event.outcome) == ("alice", "denied")


@pytest.mark.parametrize("role", ["operator", "manager"])
def test_who_reads_approvals_without_the_approver_role_cannot_decide(
    tenant: Tenant, role: str
) -> None:
    replay = _waiting(client_for(tenant))
    reader = _person(tenant, "rita", role)
    assert reader.get(f"/approvals/{replay['approval_id']}").status_code == 200
    decided = reader.post(f"/approvals/{replay['approval_id']}/decide", {"decision": "approve"})
    assert decided.status_code == 403 and decided.json()["code"] == "FORBIDDEN"
    assert ApprovalRequest.objects.get().state == "pending"


def test_a_service_account_can_never_decide(tenant: Tenant) -> None:
    replay = _waiting(client_for(tenant))
    bot = client_for(tenant)  # every scope a service account may hold
    decided = bot.post(f"/approvals/{replay['approval_id']}/decide", {"decision": "approve"})
    assert decided.status_code == 403
    assert ApprovalRequest.objects.get().state == "pending"


def test_another_tenants_approval_is_not_found(tenant: Tenant, other_tenant: Tenant) -> None:
    replay = _waiting(client_for(tenant))
    stranger = _person(other_tenant, "sam", "approver")
    assert stranger.get(f"/approvals/{replay['approval_id']}").status_code == 404
    decided = stranger.post(f"/approvals/{replay['approval_id']}/decide", {"decision": "approve"})
    assert decided.status_code == 404
    assert stranger.get("/approvals").json() == []
    assert ApprovalRequest.objects.get().state == "pending"


def test_a_decided_request_cannot_be_decided_again(tenant: Tenant) -> None:
    replay = _waiting(client_for(tenant))
    approver = _person(tenant, "bob", "approver")
    approver.post(f"/approvals/{replay['approval_id']}/decide", {"decision": "approve"})
    again = approver.post(
        f"/approvals/{replay['approval_id']}/decide", {"decision": "reject", "reason": "no"}
    )
    assert again.status_code == 409 and "already approved" in again.json()["detail"]
    decided = approver.get("/approvals", state="approved").json()
    assert [a["state"] for a in decided] == ["approved"]


def _started_and_succeeded(runtime: ApiClient, call_id: str) -> dict[str, Any]:
    """The approved call started, run and reported: the report's answer."""
    started = runtime.post(f"/calls/{call_id}/start")
    assert started.status_code == 200, started.content
    token = started.json()["lease"]["fencing_token"]
    done = runtime.post(
        f"/calls/{call_id}/complete",
        {"fencing_token": token, "outcome": "succeeded", "result": {"order": "o-1"}},
    )
    assert done.status_code == 200, done.content
    return done.json()


def test_a_call_approved_before_its_first_run_is_not_replayed(tenant: Tenant) -> None:
    """``replayed`` is true only for an answer from the record: the approved call ran itself,
    so its report's answer and a poll say false; a duplicate after it says true."""
    runtime = client_for(tenant)
    approval_policies.add_policy(
        tenant=tenant,
        actor="mia",
        source="api",
        name="large orders",
        reason="orders over 100 need a second look",
        tool="create_order",
        path="amount",
        operator="gt",
        value=100,
    )
    runtime.start_run()
    asked = runtime.call("create_order", {"amount": 500}).json()
    assert asked["decision"] == "approval_required", asked
    approver = _person(tenant, "bob", "approver")
    approver.post(f"/approvals/{asked['approval_id']}/decide", {"decision": "approve"})
    done = _started_and_succeeded(runtime, asked["call_id"])
    polled = runtime.get(f"/calls/{asked['call_id']}").json()["observation"]
    duplicate = runtime.call("create_order", {"amount": 500}, step_id="step-2").json()
    for observation in (done["observation"], polled):
        assert observation["ok"] is True, observation
        assert observation["metadata"]["replayed"] is False, observation
    assert duplicate["observation"]["metadata"]["replayed"] is True


def test_an_approved_replay_that_runs_is_not_replayed(tenant: Tenant) -> None:
    """The approved replay's answer is its own execution's, not one from the record."""
    runtime = client_for(tenant)
    replay = _waiting(runtime)
    approver = _person(tenant, "bob", "approver")
    approver.post(f"/approvals/{replay['approval_id']}/decide", {"decision": "approve"})
    done = _started_and_succeeded(runtime, replay["call_id"])
    polled = runtime.get(f"/calls/{replay['call_id']}").json()["observation"]
    for observation in (done["observation"], polled):
        assert observation["ok"] is True, observation
        assert observation["metadata"]["replayed"] is False, observation
