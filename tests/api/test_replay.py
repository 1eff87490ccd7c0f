"""``POST /calls/{call_id}/replay``: a replay is answered by the state table of DESIGN section 3
(the record as it stands), and where that lets it execute again, by the same transition as a
duplicate's replay."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

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
    replay = api.post(f"/calls/{entry.call_id}/replay", {})
    assert replay.status_code == 200, replay.content
    body = replay.json()
    assert body["decision"] == "approval_required"
    assert body["observation"]["code"] == "APPROVAL_REQUIRED"
    assert body["observation"]["metadata"]["next_action"] == "await_approval"
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
