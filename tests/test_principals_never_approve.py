"""No principal of an action approves it (DESIGN section 5), whichever path opened the approval:
the owner of the token whose call made the action, the person a service account's run is for,
whoever asked for a replay, for a look-up or for a compensation. Each refusal is audited, and
a second approver can approve. One rule decides (``approvals.refusal_of_decider``)."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth import get_user_model

from ledger.models import (
    ApiToken,
    ApprovalRequest,
    AuditEvent,
    IdempotencyRecord,
    Tenant,
    WorkspaceRoot,
)
from ledger.services import approval_policies
from ledger.services.approvals import DeciderRefused, decide
from reconcile.models import CompensationAdapter
from reconcile.services import reconcile_record
from tests.api.conftest import ApiClient, client_for
from tests.console.conftest import make_user, signed_in
from tests.factories import make_tool

pytestmark = pytest.mark.django_db


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


@pytest.fixture
def alice(tenant: Tenant) -> Any:
    return make_user(get_user_model(), "alice", tenant, "approver")


@pytest.fixture
def bob(tenant: Tenant) -> Any:
    return make_user(get_user_model(), "bob", tenant, "approver")


def _token_of(user: Any, tenant: Tenant) -> ApiClient:
    return ApiClient(tenant, ApiToken.issue(tenant=tenant, name=f"{user}-laptop", user=user)[1])


#: The lost write's input: a replay names the input it runs.
WRITE = {"path": "app.py"}


def _lost_write(api: ApiClient, *, run_id: str = "run-1", user_id: str = "u1") -> dict[str, Any]:
    """A conditional write whose outcome was lost (its record unknown)."""
    api.start_run(run_id, user_id=user_id)
    plan = {
        "workspace": "repo",
        "path": "app.py",
        "before_hash": _sha("old"),
        "after_hash": _sha("new"),
        "diff": "-old\n+new\n",
    }
    first = api.call("write_file", WRITE, write_plan=plan, run_id=run_id).json()
    done = api.post(
        f"/calls/{first['call_id']}/complete", {"fencing_token": 1, "outcome": "uncertain"}
    )
    assert done.status_code == 200, done.content
    return first


def _approval_of(call: dict[str, Any]) -> ApprovalRequest:
    return ApprovalRequest.objects.get(record__key=call["idempotency_key"], state="pending")


def _refused_then_approved_by_another(
    approval: ApprovalRequest, principal: Any, other: Any
) -> None:
    # With a reason, which a compensation's decision needs.
    with pytest.raises(DeciderRefused, match="their own request"):
        decide(approval=approval, user=principal, approve=True, reason="it is right")
    approval.refresh_from_db()
    assert approval.state == "pending"
    refused = AuditEvent.objects.get(action="approval.decide_refused", actor=principal.username)
    assert refused.outcome == "denied" and refused.target_id == str(approval.pk)
    approved = decide(approval=approval, user=other, approve=True, reason="it is right")
    assert approved.state == "approved"


def test_the_owner_of_the_calling_token_cannot_approve_a_replay_asked_by_a_service_account(
    tenant: Tenant, alice: Any, bob: Any
) -> None:
    """Alice's token made the write; a service account asks for the replay, reporting no file
    hash: the approval is opened in the service account's name, and Alice still may not give
    it."""
    first = _lost_write(_token_of(alice, tenant))
    replay = client_for(tenant).post(f"/calls/{first['call_id']}/replay", {"input": WRITE})
    assert replay.json()["decision"] == "approval_required", replay.content
    approval = _approval_of(first)
    assert approval.requested_by_user != alice
    _refused_then_approved_by_another(approval, alice, bob)


def test_the_person_a_service_accounts_run_is_for_cannot_approve(
    tenant: Tenant, alice: Any, bob: Any
) -> None:
    service = client_for(tenant)
    first = _lost_write(service, user_id="alice")
    service.post(f"/calls/{first['call_id']}/replay", {"current_hash": _sha("old")})
    _refused_then_approved_by_another(_approval_of(first), alice, bob)


def test_whoever_asked_for_the_replay_cannot_approve(tenant: Tenant, alice: Any, bob: Any) -> None:
    first = _lost_write(client_for(tenant))
    _token_of(alice, tenant).post(f"/calls/{first['call_id']}/replay", {"input": WRITE})
    approval = _approval_of(first)
    assert approval.requested_by_user == alice and approval.principal_ids == [alice.pk]
    _refused_then_approved_by_another(approval, alice, bob)


def test_whoever_asks_for_a_replay_a_worker_already_asked_for_joins_its_principals(
    tenant: Tenant, alice: Any, bob: Any, workspace: Path
) -> None:
    """The worker's file check opened the approval in no one's name; Alice's replay reporting
    no file hash joins it: she is one of its principals (kept on the approval and audited),
    not only found through her token's call."""
    first = _lost_write(client_for(tenant))
    record = IdempotencyRecord.objects.get(key=first["idempotency_key"])
    assert reconcile_record(record.pk, worker="w1") == "escalated"
    replay = _token_of(alice, tenant).post(f"/calls/{first['call_id']}/replay", {"input": WRITE})
    assert replay.json()["decision"] == "approval_required", replay.content
    approval = _approval_of(first)
    assert approval.requested_by_user is None and approval.principal_ids == [alice.pk]
    joined = AuditEvent.objects.get(action="approval.asked_again", target_id=str(approval.pk))
    assert joined.after == {"principal": alice.pk}
    _refused_then_approved_by_another(approval, alice, bob)


@pytest.fixture
def workspace(tenant: Tenant, tmp_path: Path) -> Path:
    WorkspaceRoot.objects.create(tenant=tenant, name="repo", path=str(tmp_path))
    (tmp_path / "app.py").write_text("old")  # the write did not land
    return tmp_path


def test_the_caller_cannot_approve_what_the_workers_file_check_asks(
    tenant: Tenant, alice: Any, bob: Any, workspace: Path
) -> None:
    first = _lost_write(_token_of(alice, tenant))
    record = IdempotencyRecord.objects.get(key=first["idempotency_key"])
    assert reconcile_record(record.pk, worker="w1") == "escalated"
    approval = _approval_of(first)
    assert approval.requested_by_user is None  # the worker asked
    _refused_then_approved_by_another(approval, alice, bob)


def test_the_caller_cannot_approve_what_an_operators_bulk_look_up_asks(
    tenant: Tenant, alice: Any, bob: Any, workspace: Path
) -> None:
    first = _lost_write(_token_of(alice, tenant))
    record = IdempotencyRecord.objects.get(key=first["idempotency_key"])
    operator = make_user(get_user_model(), "olga", tenant, "operator")
    response = signed_in(operator).post(
        "/unknown/bulk", {"action": "lookup", "ids": [record.pk], "confirm": "1"}
    )
    assert response.status_code in (200, 302)
    assert reconcile_record(record.pk, worker="w1") == "escalated"
    _refused_then_approved_by_another(_approval_of(first), alice, bob)


def _succeeded_order_with_a_compensation(tenant: Tenant, sandbox: Any) -> dict[str, Any]:
    """A succeeded create_order whose compensation (cancel_order at the sandbox) is declared."""
    make_tool(tenant, "create_order")
    cancel = make_tool(tenant, "cancel_order")
    CompensationAdapter.objects.create(
        tenant=tenant,
        tool=cancel,
        url_template=f"{sandbox.url}/orders/objects/{{order_id}}/cancel",
        success_statuses=[201],
    )
    runtime = client_for(tenant)
    declared = runtime.post(
        "/compensations/declarations",
        {
            "tool": "create_order",
            "compensating_tool": "cancel_order",
            "arguments": {"order_id": "result.id"},
        },
    )
    assert declared.status_code == 200, declared.content
    runtime.start_run()
    order = runtime.call("create_order", {"cart": "c1"}).json()
    runtime.post(
        f"/calls/{order['call_id']}/complete",
        {"fencing_token": 1, "outcome": "succeeded", "result": {"id": "ord_1"}},
    )
    return order


def test_whoever_asked_for_a_compensation_cannot_approve_it(
    tenant: Tenant, alice: Any, bob: Any, sandbox: Any, settings: Any
) -> None:
    settings.LEDGER_OUTBOUND_ALLOW_PRIVATE = True
    order = _succeeded_order_with_a_compensation(tenant, sandbox)
    asked = _token_of(alice, tenant).post("/compensations", {"key": order["idempotency_key"]})
    assert asked.status_code == 201, asked.content
    approval = ApprovalRequest.objects.get(state="pending")
    _refused_then_approved_by_another(approval, alice, bob)


@pytest.mark.parametrize("role", ["", "operator", "manager"])
def test_a_member_without_the_approver_role_cannot_decide(tenant: Tenant, role: str) -> None:
    first = _lost_write(client_for(tenant))
    client_for(tenant).post(f"/calls/{first['call_id']}/replay", {"input": WRITE})
    member = make_user(get_user_model(), "mia", tenant, role)
    with pytest.raises(DeciderRefused, match="approver role"):
        decide(approval=_approval_of(first), user=member, approve=True, reason="")


def test_an_approver_of_another_tenant_cannot_decide(tenant: Tenant, other_tenant: Tenant) -> None:
    first = _lost_write(client_for(tenant))
    client_for(tenant).post(f"/calls/{first['call_id']}/replay", {"input": WRITE})
    outsider = make_user(get_user_model(), "otto", other_tenant, "approver")
    with pytest.raises(DeciderRefused, match="approver role"):
        decide(approval=_approval_of(first), user=outsider, approve=True, reason="")


def test_the_caller_cannot_approve_what_a_policy_asks_before_the_first_run(
    tenant: Tenant, alice: Any, bob: Any
) -> None:
    approval_policies.add_policy(
        tenant=tenant,
        actor="mia",
        source="api",
        name="large orders",
        reason="a second look",
        tool="create_order",
        path="amount",
        operator="gt",
        value=100,
    )
    runtime = _token_of(alice, tenant)
    runtime.start_run()
    asked = runtime.call("create_order", {"amount": 500}).json()
    assert asked["decision"] == "approval_required", asked
    approval = ApprovalRequest.objects.get(pk=asked["approval_id"])
    assert approval.policy is not None and approval.requested_by_user == alice
    _refused_then_approved_by_another(approval, alice, bob)


def test_whoever_asks_again_for_a_pending_compensation_cannot_approve_it(
    tenant: Tenant, alice: Any, bob: Any, sandbox: Any, settings: Any
) -> None:
    """Alice asks for a compensation on the console; Bob, an approver, asks for it again while
    it waits: he is one of its principals now, so neither may approve it; Carol can."""
    settings.LEDGER_OUTBOUND_ALLOW_PRIVATE = True
    order = _succeeded_order_with_a_compensation(tenant, sandbox)
    record = IdempotencyRecord.objects.get(key=order["idempotency_key"])
    for asker in (alice, bob):
        asked = signed_in(asker).post(f"/compensations/records/{record.pk}/request")
        assert asked.status_code in (200, 302), asked.content
    approval = ApprovalRequest.objects.get(state="pending")
    assert approval.principal_ids == [alice.pk, bob.pk]
    joined = AuditEvent.objects.get(action="approval.asked_again", target_id=str(approval.pk))
    assert joined.actor == "bob" and joined.source == "console"
    with pytest.raises(DeciderRefused, match="their own request"):
        decide(approval=approval, user=bob, approve=True, reason="it is right")
    carol = make_user(get_user_model(), "carol", tenant, "approver")
    _refused_then_approved_by_another(approval, alice, carol)
