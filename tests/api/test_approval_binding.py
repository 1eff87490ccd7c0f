"""An approval starts only the exact action it was given for (DESIGN section 5): its action
hash covers the tool, the input fingerprint, each write-plan hash and the version
combination, and a change of any one of them makes ``/start`` refuse with
``APPROVAL_INVALID``, void the approval and start nothing."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import Any

import pytest

from ledger import combinations
from ledger.domain import KeyScope
from ledger.models import (
    ApprovalRequest,
    AuditEvent,
    IdempotencyRecord,
    LedgerEntry,
    Tenant,
    VersionCombination,
    WritePlan,
)
from ledger.services.approvals import decide
from tests.api.conftest import ApiClient, client_for
from tests.factories import make_approver, make_tool

pytestmark = pytest.mark.django_db

VERSIONS = {"model": "m", "prompt": "p", "rules": "r", "tool_schema": "t", "data_version": "d"}


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def _combination(tenant: Tenant, label: str, prompt: str) -> VersionCombination:
    combination, _ = combinations.create_combination(
        tenant=tenant, label=label, actor="test", source="api", **{**VERSIONS, "prompt": prompt}
    )
    combinations.activate(tenant=tenant, combination_id=combination.pk, actor="test", source="api")
    return combination


def _write(api: ApiClient, run_id: str) -> Any:
    plan = {
        "workspace": "repo",
        "path": "src/app.py",
        "before_hash": _sha("old"),
        "after_hash": _sha("new"),
        "diff": "-old\n+new\n",
    }
    return api.call(
        "write_file",
        {"path": "src/app.py", "content": "new"},
        write_plan=plan,
        run_id=run_id,
        business_object_id="src/app.py",
    )


@pytest.fixture
def approved(tenant: Tenant) -> tuple[ApiClient, dict[str, Any]]:
    """A business-scoped write whose outcome is unknown, its replay approved by a human
    under the combination its run started with: the replay waits for ``/start``."""
    make_tool(tenant, "write_file", key_scope=KeyScope.BUSINESS)
    first_combination = _combination(tenant, "first", "p1")
    api = client_for(tenant)
    run = api.post(
        "/runs", {"run_id": "run-1", "user_id": "u1", "combination_id": first_combination.pk}
    )
    assert run.status_code in (200, 201), run.content
    first = _write(api, "run-1").json()
    api.post(f"/calls/{first['call_id']}/complete", {"fencing_token": 1, "outcome": "uncertain"})
    replay = api.post(f"/calls/{first['call_id']}/replay", {"current_hash": _sha("old")}).json()
    assert replay["decision"] == "approval_required", replay
    approver = make_approver(api.tenant, "approver")
    decide(approval=ApprovalRequest.objects.get(), user=approver, approve=True, reason="ok")
    return api, replay


def _change_tool(tenant: Tenant, entry: LedgerEntry) -> None:
    LedgerEntry.objects.filter(pk=entry.pk).update(tool=make_tool(tenant, "apply_patch"))


def _change_input(tenant: Tenant, entry: LedgerEntry) -> None:
    LedgerEntry.objects.filter(pk=entry.pk).update(input_hash=_sha("other input"))


def _change_plan(field: str, value: str) -> Callable[[Tenant, LedgerEntry], None]:
    def change(tenant: Tenant, entry: LedgerEntry) -> None:
        WritePlan.objects.filter(entry__record_id=entry.record_id).update(**{field: value})

    return change


def _change_combination(tenant: Tenant, entry: LedgerEntry) -> None:
    LedgerEntry.objects.filter(pk=entry.pk).update(combination=_combination(tenant, "second", "p2"))


CHANGES = {
    "tool": _change_tool,
    "input_fingerprint": _change_input,
    "write_plan_path": _change_plan("path", "src/other.py"),
    "write_plan_before_hash": _change_plan("before_hash", _sha("older")),
    "write_plan_after_hash": _change_plan("after_hash", _sha("newer")),
    "version_combination": _change_combination,
}


def _assert_refused_and_nothing_started(response: Any) -> None:
    assert response.status_code == 409, response.content
    assert response.json()["code"] == "APPROVAL_INVALID"
    record = IdempotencyRecord.objects.get()
    assert (record.state, record.executions, record.fencing_token) == ("unknown", 1, 1)
    assert ApprovalRequest.objects.get().state == "invalidated"
    assert AuditEvent.objects.filter(action="approval.invalidated").count() == 1
    assert not AuditEvent.objects.filter(action="approval.consumed").exists()


def test_the_approved_action_itself_starts(approved) -> None:
    api, replay = approved
    started = api.post(f"/calls/{replay['call_id']}/start")
    assert started.status_code == 200, started.content
    assert started.json()["lease"]["fencing_token"] == 2
    assert ApprovalRequest.objects.get().state == "consumed"


@pytest.mark.parametrize("component", list(CHANGES))
def test_an_approval_is_refused_when_what_its_hash_covers_changed(
    tenant, approved, component: str
) -> None:
    api, replay = approved
    CHANGES[component](tenant, LedgerEntry.objects.get(call_id=replay["call_id"]))
    _assert_refused_and_nothing_started(api.post(f"/calls/{replay['call_id']}/start"))


def test_a_duplicate_from_a_run_under_another_combination_cannot_use_the_approval(
    tenant, approved
) -> None:
    """The same business action re-sent from a run started under another combination is
    the same record, but not the action the human approved."""
    api, _replay = approved
    second = _combination(tenant, "second", "p2")
    run = api.post("/runs", {"run_id": "run-2", "user_id": "u1", "combination_id": second.pk})
    assert run.status_code in (200, 201), run.content
    duplicate = _write(api, "run-2").json()
    assert duplicate["decision"] == "approval_required", duplicate
    assert duplicate["idempotency_key"] == IdempotencyRecord.objects.get().key
    _assert_refused_and_nothing_started(api.post(f"/calls/{duplicate['call_id']}/start"))


def test_a_start_with_another_input_runs_nothing_and_keeps_the_approval(approved) -> None:
    api, replay = approved
    other = api.post(
        f"/calls/{replay['call_id']}/start", {"input": {"path": "src/app.py", "content": "evil"}}
    )
    assert other.status_code == 422, other.content
    assert other.json()["code"] == "IDEMPOTENCY_KEY_CONFLICT"
    record = IdempotencyRecord.objects.get()
    assert (record.state, record.executions) == ("unknown", 1)
    assert ApprovalRequest.objects.get().state == "approved"
    refused = AuditEvent.objects.get(action="call.start_refused")
    assert refused.outcome == "denied"
    started = api.post(f"/calls/{replay['call_id']}/start")  # the action's own input
    assert started.status_code == 200, started.content


def test_a_replay_with_another_input_is_refused_and_writes_nothing(tenant: Tenant) -> None:
    make_tool(tenant, "write_file")
    api = client_for(tenant)
    api.start_run()
    first = _write(api, "run-1").json()
    api.post(f"/calls/{first['call_id']}/complete", {"fencing_token": 1, "outcome": "uncertain"})
    entries = LedgerEntry.objects.count()
    other = api.post(
        f"/calls/{first['call_id']}/replay",
        {"input": {"path": "src/app.py", "content": "other"}, "current_hash": _sha("old")},
    )
    assert other.status_code == 422, other.content
    assert other.json()["code"] == "IDEMPOTENCY_KEY_CONFLICT"
    assert LedgerEntry.objects.count() == entries
    assert not ApprovalRequest.objects.exists()


def test_a_replay_must_name_the_input_it_runs(tenant: Tenant) -> None:
    api = client_for(tenant)
    api.start_run()
    first = api.call("create_order", {"amount": 10}, business_object_id="o-1").json()
    response = api.post(f"/calls/{first['call_id']}/replay", raw="{}")
    assert response.status_code == 400, response.content
    assert "input" in response.json()["detail"]
