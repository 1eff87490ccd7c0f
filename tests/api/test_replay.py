"""``POST /calls/{call_id}/replay``: a replay is answered by the state table of DESIGN section 3
(the record as it stands), and where that lets it execute again, by the same transition as a
duplicate's replay."""

from __future__ import annotations

import hashlib
from datetime import timedelta

import pytest
from django.utils import timezone

from ledger.compensation import compensation_arguments
from ledger.domain import EscalationKind
from ledger.models import ApprovalRequest, AuditEvent, IdempotencyRecord
from tests.api.conftest import ApiClient
from tests.factories import make_entry, make_tool, reserve

pytestmark = pytest.mark.django_db


def _uncertain_read(api: ApiClient) -> dict:
    api.start_run()
    first = api.call("read_file", {"path": "a.txt"}).json()
    api.post(f"/calls/{first['call_id']}/complete", {"fencing_token": 1, "outcome": "uncertain"})
    return first


def _record_events(record: IdempotencyRecord) -> list[str]:
    events = AuditEvent.objects.filter(target_type="idempotencyrecord", target_id=str(record.pk))
    return list(events.order_by("pk").values_list("action", flat=True))


def test_an_automatic_replay_is_the_state_tables_replay(api: ApiClient) -> None:
    first = _uncertain_read(api)
    replay = api.post(f"/calls/{first['call_id']}/replay", {}).json()
    assert replay["decision"] == "execute" and replay["lease"]["fencing_token"] == 2
    record = IdempotencyRecord.objects.get()
    assert (record.state, record.executions) == ("executing", 2)
    assert _record_events(record) == ["record.started", "record.unknown", "record.replayed"]


def test_a_replay_of_a_call_waiting_for_its_approval_waits_for_the_approval(
    api: ApiClient,
) -> None:
    """A reserved record waiting for a human answers a replay as it answers a duplicate:
    approval required, with the record's approval request, never ``wait``."""
    tool = make_tool(api.tenant, "send_email")
    record = reserve(api.tenant, tool, key="k-mail", requires_approval=True).record
    entry = make_entry(api.tenant, tool)
    entry.record = record
    entry.save(update_fields=["record"])
    # The action's input, as the factory's reservation fingerprinted it.
    replay = api.post(f"/calls/{entry.call_id}/replay", {"input": {"cart": "cart-1"}})
    assert replay.status_code == 200, replay.content
    body = replay.json()
    assert body["decision"] == "approval_required"
    assert body["observation"]["code"] == "APPROVAL_REQUIRED"
    assert body["observation"]["metadata"]["next_action"] == "await_approval"
    # A hold of a replay, not of an approval policy: a framework's approval never decides it.
    assert "approval_policy" not in body["observation"]["metadata"]
    assert ApprovalRequest.objects.get().record_id == record.pk


def test_a_replay_of_a_call_whose_lease_lapsed_answers_it_as_unknown(api: ApiClient) -> None:
    """The lapse is judged under the lock as for a duplicate: the record becomes unknown, and
    an idempotent call is replayed, rather than told to wait for a holder that is gone."""
    api.start_run()
    first = api.call("read_file", {"path": "a.txt"}).json()
    IdempotencyRecord.objects.update(lease_expires_at=timezone.now() - timedelta(minutes=1))
    replay = api.post(f"/calls/{first['call_id']}/replay", {}).json()
    assert replay["decision"] == "execute" and replay["lease"]["fencing_token"] == 2
    record = IdempotencyRecord.objects.get()
    assert _record_events(record) == [
        "record.started",
        "record.lease_expired",
        "record.replayed",
    ]


# --- the write plan check (DESIGN section 5) -----------------------------------------------


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def _write(api: ApiClient, report: dict) -> dict:
    """A conditional write of ``src/app.py`` from "old" to "new", reported as ``report``."""
    api.start_run()
    plan = {
        "workspace": "repo",
        "path": "src/app.py",
        "before_hash": _sha("old"),
        "after_hash": _sha("new"),
        "diff": "-old\n+new\n",
    }
    first = api.call("write_file", {"path": "src/app.py", "content": "new"}, write_plan=plan)
    call = first.json()
    done = api.post(f"/calls/{call['call_id']}/complete", {"fencing_token": 1, **report})
    assert done.status_code == 200, done.content
    return call


UNCERTAIN = {"outcome": "uncertain"}
FAILED_RETRYABLE = {
    "outcome": "failed",
    "retryable": True,
    "error": {"code": "DISK_FULL", "message": "no space left"},
}


def _approval_condition() -> str:
    event = AuditEvent.objects.get(action="approval.requested")
    return event.after["condition"]


def test_a_write_a_replay_finds_applied_is_settled_with_the_file_as_evidence(
    api: ApiClient,
) -> None:
    """The same result as a worker's file check records, which a compensation reads its
    arguments from."""
    first = _write(api, UNCERTAIN)
    replay = api.post(f"/calls/{first['call_id']}/replay", {"current_hash": _sha("new")}).json()
    assert replay["observation"]["code"] == "ALREADY_APPLIED"
    record = IdempotencyRecord.objects.get()
    assert record.state == "succeeded"
    assert record.result == {
        "evidence": {"path": "src/app.py", "current_hash": _sha("new")},
        "reconciled": "already_applied",
    }
    arguments = compensation_arguments({"path": "result.path"}, tool_input={}, result=record.result)
    assert arguments == {"path": "src/app.py"}


def test_a_write_a_replay_finds_not_landed_is_escalated_as_a_worker_escalates_it(
    api: ApiClient,
) -> None:
    first = _write(api, UNCERTAIN)
    replay = api.post(f"/calls/{first['call_id']}/replay", {"current_hash": _sha("old")}).json()
    assert replay["decision"] == "approval_required"
    assert _approval_condition() == "apply_again"
    record = IdempotencyRecord.objects.get()
    assert record.state == "unknown"
    assert record.escalation_kind == EscalationKind.WRITE_NOT_LANDED


@pytest.mark.parametrize(
    ("current", "condition"),
    [("new", "already_applied"), ("theirs", "conflict"), ("old", "apply_again")],
)
def test_a_retryable_failed_write_is_put_to_a_human_whatever_the_file_shows(
    api: ApiClient, current: str, condition: str
) -> None:
    """A failed write had no effect: there is no outcome to settle or escalate. Whatever the
    check finds, only a human may write it again, told what the check found."""
    first = _write(api, FAILED_RETRYABLE)
    replay = api.post(f"/calls/{first['call_id']}/replay", {"current_hash": _sha(current)})
    assert replay.status_code == 200, replay.content
    body = replay.json()
    assert body["decision"] == "approval_required"
    assert body["observation"]["code"] == "APPROVAL_REQUIRED"
    assert _approval_condition() == condition
    record = IdempotencyRecord.objects.get()
    assert (record.state, record.executions, record.escalated_at) == ("failed_final", 1, None)
