"""The hot path and its follow-ups through the HTTP API."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

import pytest

from ledger.errors import ApprovalError
from ledger.models import (
    ApprovalRequest,
    AuditEvent,
    IdempotencyRecord,
    LedgerEntry,
    WorkspaceRoot,
    WritePlan,
)
from ledger.records import Outcome, resolve_unknown
from ledger.services.approvals import decide
from reconcile.services import reconcile_record
from tests.api.conftest import ApiClient
from tests.factories import make_approver

pytestmark = pytest.mark.django_db


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def test_first_call_executes_with_a_lease(api: ApiClient) -> None:
    api.start_run()
    response = api.call("create_order", {"cart": "c-1"}, business_object_id="cart-1")
    assert response.status_code == 200
    body = response.json()
    assert body["decision"] == "execute" and body["observation"] is None
    assert body["lease"]["fencing_token"] == 1
    assert body["idempotency_key"] == "agent:acme:u1:create_order:cart-1"
    assert body["status"] == "started"
    assert body["classification"]["replay_policy"] == "never"


def test_a_first_call_of_a_registered_tool_answers_with_its_executing_record(
    api: ApiClient,
) -> None:
    """The tool known (registered by the run's first call), a new key is taken in the one
    statement that writes the record, its audit event and the call's entry."""
    api.start_run()
    api.call("create_order", {"cart": "c-1"}, business_object_id="cart-1")
    body = api.call("create_order", {"cart": "c-2"}, business_object_id="cart-2").json()
    assert (body["decision"], body["status"], body["record_state"]) == (
        "execute",
        "started",
        "executing",
    )
    entry = LedgerEntry.objects.get(call_id=body["call_id"])
    assert entry.record is not None and entry.record.key.endswith(":cart-2")


def test_duplicate_after_success_returns_the_recorded_result(api: ApiClient) -> None:
    api.start_run()
    first = api.call("create_order", {"cart": "c-1"}, business_object_id="cart-1").json()
    done = api.post(
        f"/calls/{first['call_id']}/complete",
        {"fencing_token": 1, "outcome": "succeeded", "result": {"order": "o-1"}},
    )
    assert done.status_code == 200, done.content
    again = api.call("create_order", {"cart": "c-1"}, business_object_id="cart-1").json()
    assert again["decision"] == "recorded_result"
    assert again["observation"] == {
        "ok": True,
        "content": {"order": "o-1"},
        "metadata": {
            "idempotency": "non_idempotent",
            "replay_policy": "never",
            "idempotency_key": "agent:acme:u1:create_order:cart-1",
            "call_id": again["call_id"],
            "replayed": True,
        },
    }
    assert LedgerEntry.objects.count() == 2
    assert IdempotencyRecord.objects.get().executions == 1


def test_duplicate_while_executing_waits_with_409_and_retry_after(api: ApiClient) -> None:
    api.start_run()
    api.call("create_order", {"cart": "c-1"}, business_object_id="cart-1")
    response = api.call("create_order", {"cart": "c-1"}, business_object_id="cart-1")
    assert response.status_code == 409 and response["Retry-After"] == "2"
    assert response.json()["observation"]["code"] == "IN_PROGRESS"


def test_same_key_other_parameters_is_a_422_conflict(api: ApiClient) -> None:
    api.start_run()
    api.call("create_order", {"cart": "c-1", "total": 10}, business_object_id="cart-1")
    response = api.call("create_order", {"cart": "c-1", "total": 99}, business_object_id="cart-1")
    assert response.status_code == 422
    assert response.json()["observation"]["code"] == "IDEMPOTENCY_KEY_CONFLICT"
    assert IdempotencyRecord.objects.get().executions == 1


def test_uncertain_create_order_is_never_retried(api: ApiClient) -> None:
    api.start_run()
    first = api.call("create_order", {"cart": "c-1"}, business_object_id="cart-1").json()
    done = api.post(
        f"/calls/{first['call_id']}/complete", {"fencing_token": 1, "outcome": "uncertain"}
    ).json()
    assert done["observation"]["code"] == "SIDE_EFFECT_UNCERTAIN"
    assert done["observation"]["metadata"]["retryable"] is False
    again = api.call("create_order", {"cart": "c-1"}, business_object_id="cart-1").json()
    assert again["decision"] == "forbidden"
    assert again["observation"]["metadata"]["next_action"] == "lookup"
    replay = api.post(f"/calls/{first['call_id']}/replay", {}).json()
    assert replay["decision"] == "forbidden"
    assert IdempotencyRecord.objects.get().executions == 1


def test_uncertain_read_file_is_replayed(api: ApiClient) -> None:
    api.start_run()
    first = api.call("read_file", {"path": "a.txt"}).json()
    api.post(f"/calls/{first['call_id']}/complete", {"fencing_token": 1, "outcome": "uncertain"})
    again = api.call("read_file", {"path": "a.txt"}).json()
    assert again["decision"] == "execute" and again["lease"]["fencing_token"] == 2


def test_permission_denied_is_never_replayed(api: ApiClient) -> None:
    api.start_run()
    first = api.call("read_file", {"path": "secret"}).json()
    api.post(
        f"/calls/{first['call_id']}/complete",
        {
            "fencing_token": 1,
            "outcome": "failed",
            "retryable": True,
            "error": {"code": "PERMISSION_DENIED", "message": "no access"},
        },
    )
    replay = api.post(f"/calls/{first['call_id']}/replay", {}).json()
    assert replay["decision"] == "forbidden"
    assert replay["observation"]["code"] == "PERMISSION_DENIED"
    again = api.call("read_file", {"path": "secret"}).json()
    assert again["decision"] == "recorded_result"
    assert again["observation"]["code"] == "PERMISSION_DENIED"


def test_run_command_is_classified_per_call(api: ApiClient) -> None:
    api.start_run()
    ls = api.call("run_command", {"command": "ls"}, step_id="s-ls").json()
    publish = api.call("run_command", {"command": "npm publish"}, step_id="s-pub").json()
    assert ls["classification"]["replay_policy"] == "auto"
    assert publish["classification"]["replay_policy"] == "never"


def _write(api: ApiClient, before: str, after: str) -> dict:
    plan = {
        "workspace": "repo",
        "path": "src/app.py",
        "before_hash": _sha(before),
        "after_hash": _sha(after),
        "diff": "-old\n+new\n",
    }
    first = api.call("write_file", {"path": "src/app.py", "content": after}, write_plan=plan).json()
    api.post(f"/calls/{first['call_id']}/complete", {"fencing_token": 1, "outcome": "uncertain"})
    return first


def test_a_write_plans_diff_and_reference_are_stored_redacted(api: ApiClient) -> None:
    """Approvers read the diff; a diff of a settings file holds secrets. The reference is cut to
    its column when a marker is longer than the secret it replaced."""
    api.start_run()
    plan = {
        "workspace": "repo",
        "path": ".env",
        "before_hash": _sha("old"),
        "after_hash": _sha("new"),
        "diff": "-DB_PASSWORD=old-pw-1\n+DB_PASSWORD=new-pw-2\n",
        "patch_ref": "r" * 192 + " pwd: k9",
    }
    first = api.call("write_file", {"path": ".env"}, write_plan=plan)
    assert first.status_code == 200, first.content
    stored = WritePlan.objects.get()
    assert stored.diff == "-DB_PASSWORD=[REDACTED]\n+DB_PASSWORD=[REDACTED]\n"
    assert stored.patch_ref == ("r" * 192 + " pwd: [REDACTED]")[:200]


def test_write_replay_already_applied_marks_succeeded(api: ApiClient) -> None:
    api.start_run()
    first = _write(api, "old", "new")
    replay = api.post(f"/calls/{first['call_id']}/replay", {"current_hash": _sha("new")}).json()
    assert replay["observation"]["code"] == "ALREADY_APPLIED"
    assert IdempotencyRecord.objects.get().state == "succeeded"
    assert IdempotencyRecord.objects.get().executions == 1


def test_write_replay_with_changed_file_is_a_conflict(api: ApiClient) -> None:
    api.start_run()
    first = _write(api, "old", "new")
    replay = api.post(
        f"/calls/{first['call_id']}/replay", {"current_hash": _sha("someone else")}
    ).json()
    assert replay["decision"] == "forbidden"
    assert replay["observation"]["code"] == "WRITE_CONFLICT"


def test_write_replay_apply_again_needs_an_approval_then_starts(
    api: ApiClient, django_user_model
) -> None:
    api.start_run()
    first = _write(api, "old", "new")
    replay = api.post(f"/calls/{first['call_id']}/replay", {"current_hash": _sha("old")}).json()
    assert replay["decision"] == "approval_required"
    not_yet = api.post(f"/calls/{replay['call_id']}/start")
    assert not_yet.status_code == 409
    approver = make_approver(api.tenant, "approver")
    decide(approval=ApprovalRequest.objects.get(), user=approver, approve=True, reason="ok")
    started = api.post(f"/calls/{replay['call_id']}/start")
    assert started.status_code == 200, started.content
    assert started.json()["lease"]["fencing_token"] == 2
    assert ApprovalRequest.objects.get().state == "consumed"
    used_twice = api.post(f"/calls/{replay['call_id']}/start")
    assert used_twice.status_code == 409


def test_a_replay_waiting_for_its_approval_says_so(api: ApiClient) -> None:
    """A replay waiting for a human is APPROVAL_REQUIRED, not SIDE_EFFECT_UNCERTAIN (its record
    is still unknown), so a runtime whose approval deadline passes never tells the model to
    look the call up."""
    api.start_run()
    first = _write(api, "old", "new")
    replay = api.post(f"/calls/{first['call_id']}/replay", {"current_hash": _sha("old")}).json()
    waiting = api.get(f"/calls/{replay['call_id']}").json()["observation"]
    assert waiting["code"] == "APPROVAL_REQUIRED"
    assert waiting["metadata"]["next_action"] == "await_approval"
    # The call that went missing is still what it was: uncertain.
    original = api.get(f"/calls/{first['call_id']}").json()["observation"]
    assert original["code"] == "SIDE_EFFECT_UNCERTAIN"


def test_rejection_reaches_the_model_as_an_observation(api: ApiClient, django_user_model) -> None:
    api.start_run()
    first = _write(api, "old", "new")
    replay = api.post(f"/calls/{first['call_id']}/replay", {"current_hash": _sha("old")}).json()
    approver = make_approver(api.tenant, "approver")
    decide(
        approval=ApprovalRequest.objects.get(), user=approver, approve=False, reason="wrong file"
    )
    status = api.get(f"/calls/{replay['call_id']}").json()
    assert status["observation"]["code"] == "APPROVAL_REJECTED"
    assert "wrong file" in status["observation"]["content"]
    assert status["observation"]["ok"] is False


def test_a_rejected_replay_is_not_put_to_a_human_again(api: ApiClient, django_user_model) -> None:
    """Asking for the same replay after a human rejected it opens no new approval request, as a
    new call of the same action (record_call) is refused: the rejection stands for this exact
    action, and the model gets the reason again."""
    api.start_run()
    first = _write(api, "old", "new")
    api.post(f"/calls/{first['call_id']}/replay", {"current_hash": _sha("old")})
    approver = make_approver(api.tenant, "approver")
    decide(
        approval=ApprovalRequest.objects.get(), user=approver, approve=False, reason="wrong file"
    )
    again = api.post(f"/calls/{first['call_id']}/replay", {"current_hash": _sha("old")}).json()
    assert again["decision"] == "forbidden"
    assert again["observation"]["code"] == "APPROVAL_REJECTED"
    assert "wrong file" in again["observation"]["content"]
    assert ApprovalRequest.objects.count() == 1
    status = api.get(f"/calls/{again['call_id']}").json()
    assert status["observation"]["code"] == "APPROVAL_REJECTED"


def test_malformed_result_is_not_a_success(api: ApiClient) -> None:
    api.post(
        "/tools",
        {
            "name": "get_price",
            "idempotency": "idempotent",
            "output_schema": {"type": "object", "required": ["price"]},
        },
    )
    api.start_run()
    first = api.call("get_price", {"sku": "x"}).json()
    done = api.post(
        f"/calls/{first['call_id']}/complete",
        {"fencing_token": 1, "outcome": "succeeded", "result": {"oops": 1}},
    ).json()
    assert done["record_state"] == "unknown" and done["status"] == "uncertain"
    assert "output schema" in done["notes"][0]


def test_a_malformed_results_note_names_the_rule_never_the_value(api: ApiClient) -> None:
    """The note is stored as the record's error: a value out of its field (a secret under a
    neutral name, say) would be kept with nothing left to say it is one."""
    schema = {"type": "object", "properties": {"code": {"type": "integer"}}}
    api.post("/tools", {"name": "get_code", "idempotency": "idempotent", "output_schema": schema})
    api.start_run()
    first = api.call("get_code", {"sku": "x"}).json()
    done = api.post(
        f"/calls/{first['call_id']}/complete",
        {"fencing_token": 1, "outcome": "succeeded", "result": {"code": "s3cr3t-value"}},
    ).json()
    note = done["notes"][0]
    assert "$.code" in note and '"integer"' in note and "s3cr3t-value" not in note
    record = IdempotencyRecord.objects.get(key=first["idempotency_key"])
    assert record.error["message"] == note


def test_stale_fencing_token_is_refused(api: ApiClient) -> None:
    api.start_run()
    first = api.call("read_file", {"path": "a"}).json()
    response = api.post(
        f"/calls/{first['call_id']}/complete",
        {"fencing_token": 5, "outcome": "succeeded", "result": {}},
    )
    assert response.status_code == 409
    assert response["Content-Type"] == "application/problem+json"
    assert response.json()["code"] == "STALE_FENCING_TOKEN"


def test_heartbeat_extends_the_lease(api: ApiClient) -> None:
    api.start_run()
    first = api.call("read_file", {"path": "a"}).json()
    beat = api.post(f"/calls/{first['call_id']}/heartbeat", {"fencing_token": 1})
    assert beat.status_code == 200
    assert beat.json()["lease_expires_at"] >= first["lease"]["expires_at"]


# How every JSON answer of the API writes a time: ISO 8601, milliseconds, Z for UTC.
API_TIME = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{3})?Z$")


def test_call_answers_write_times_and_text_as_the_rest_of_the_api(api: ApiClient) -> None:
    """The call answers are serialised by pydantic, the others by django-ninja's encoder:
    the same time format and content type either way."""
    run = api.start_run()
    assert API_TIME.match(run["started_at"]), run
    first = api.call("read_file", {"path": "données/é"})
    assert first["Content-Type"] == "application/json; charset=utf-8"
    assert API_TIME.match(first.json()["lease"]["expires_at"]), first.json()["lease"]
    beat = api.post(f"/calls/{first.json()['call_id']}/heartbeat", {"fencing_token": 1})
    assert API_TIME.match(beat.json()["lease_expires_at"]), beat.json()


def test_record_lookup_by_key(api: ApiClient) -> None:
    api.start_run()
    first = api.call("create_order", {"cart": "c-1"}, business_object_id="cart-1").json()
    found = api.get("/records", key=first["idempotency_key"]).json()
    assert found["state"] == "executing" and found["tool"] == "create_order"
    assert api.get("/records", key="agent:nope").status_code == 404


def test_a_final_failure_reported_late_voids_the_approval(
    api: ApiClient, django_user_model
) -> None:
    api.start_run()
    first = _write(api, "old", "new")
    duplicate = api.call("write_file", {"path": "src/app.py", "content": "new"}).json()
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
    approver = make_approver(api.tenant, "approver")
    with pytest.raises(ApprovalError):
        decide(approval=approval, user=approver, approve=True, reason="ok")
    assert api.post(f"/calls/{duplicate['call_id']}/start").status_code == 409
    assert IdempotencyRecord.objects.get().executions == 1


def test_an_approval_the_worker_requested_can_be_used(
    api: ApiClient, tenant, tmp_path: Path, django_user_model
) -> None:
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "app.py").write_text("old")
    WorkspaceRoot.objects.create(tenant=tenant, name="repo", path=str(tmp_path))
    api.start_run()
    first = _write(api, "old", "new")
    record = IdempotencyRecord.objects.get()
    assert reconcile_record(record.pk) == "escalated"
    approval = ApprovalRequest.objects.get()
    approver = make_approver(api.tenant, "approver")
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


def test_a_token_that_is_not_the_calls_own_is_refused_and_audited(api: ApiClient) -> None:
    """A report under another call's token, here the current holder's, is refused as a stale
    token is: audited, and answered with the call as it stands for the model."""
    api.start_run()
    first = api.call("read_file", {"p": 1}).json()
    api.post(f"/calls/{first['call_id']}/complete", {"fencing_token": 1, "outcome": "uncertain"})
    replayed = api.call("read_file", {"p": 1}).json()
    assert replayed["lease"]["fencing_token"] == 2
    refused = api.post(
        f"/calls/{first['call_id']}/complete",
        {"fencing_token": 2, "outcome": "succeeded", "result": {}},
    )
    assert refused.status_code == 409
    body = refused.json()
    assert body["code"] == "STALE_FENCING_TOKEN"
    assert body["detail"] == "fencing token 2 does not belong to this call"
    assert body["record_state"] == "executing"
    assert body["observation"]["code"] == "IN_PROGRESS"
    event = AuditEvent.objects.get(action="record.complete_refused", outcome="denied")
    assert event.detail == "token 2 reported succeeded; record is executing with token 2"
    assert IdempotencyRecord.objects.get().state == "executing"


def test_a_redacted_recorded_result_says_so(api: ApiClient) -> None:
    api.start_run()
    first = api.call("create_order", {"c": 1}, business_object_id="c1").json()
    api.post(
        f"/calls/{first['call_id']}/complete",
        {"fencing_token": 1, "outcome": "succeeded", "result": {"email": "a@b.co"}},
    )
    again = api.call("create_order", {"c": 1}, business_object_id="c1").json()
    assert again["observation"]["metadata"]["result_redacted"] is True


def test_a_redacted_result_says_so_in_the_call_as_it_stands(api: ApiClient) -> None:
    """The report's own answer and a poll describe the settled call as a duplicate does."""
    api.start_run()
    first = api.call("create_order", {"c": 1}, business_object_id="c1").json()
    done = api.post(
        f"/calls/{first['call_id']}/complete",
        {"fencing_token": 1, "outcome": "succeeded", "result": {"email": "a@b.co"}},
    ).json()
    assert done["observation"]["metadata"]["result_redacted"] is True
    polled = api.get(f"/calls/{first['call_id']}").json()["observation"]
    assert polled["metadata"]["result_redacted"] is True
    assert polled["metadata"]["replayed"] is False


def test_a_retryable_failure_as_it_stands_says_a_replay_may_be_asked_for(api: ApiClient) -> None:
    api.start_run()
    first = api.call("create_order", {"c": 1}, business_object_id="c1").json()
    done = api.post(
        f"/calls/{first['call_id']}/complete",
        {
            "fencing_token": 1,
            "outcome": "failed",
            "retryable": True,
            "error": {"code": "UPSTREAM_DOWN", "message": "try later"},
        },
    ).json()
    polled = api.get(f"/calls/{first['call_id']}").json()["observation"]
    duplicate = api.call("create_order", {"c": 1}, business_object_id="c1").json()["observation"]
    for observation in (done["observation"], polled, duplicate):
        assert observation["code"] == "UPSTREAM_DOWN"
        assert observation["metadata"]["retryable"] is True
        assert observation["metadata"]["next_action"] == "request_replay"
    assert duplicate["metadata"]["replayed"] is True and polled["metadata"]["replayed"] is False


def test_a_failure_settled_without_an_error_is_told_without_one(api: ApiClient) -> None:
    api.start_run()
    first = api.call("create_order", {"c": 1}, business_object_id="c1").json()
    api.post(f"/calls/{first['call_id']}/complete", {"fencing_token": 1, "outcome": "uncertain"})
    resolve_unknown(
        record=IdempotencyRecord.objects.get(),
        outcome=Outcome.FAILED,
        actor="olga",
        detail="checked the order system: nothing there",
    )
    polled = api.get(f"/calls/{first['call_id']}").json()["observation"]
    assert polled["code"] == "FAILED"
    assert polled["content"] == "create_order failed: no detail"


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
