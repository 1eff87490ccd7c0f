"""The fencing token: only the current holder of a record may extend its lease or report its
outcome. An older token (a holder replaced by a replay) and a token never issued (higher than
the current one) are both refused, audited where a report is refused, and change nothing."""

from __future__ import annotations

import pytest

from ledger.domain import RecordState
from ledger.errors import StaleFencingToken
from ledger.models import AuditEvent, IdempotencyRecord
from ledger.records import Outcome, complete_execution, heartbeat
from tests.api.conftest import client_for
from tests.factories import refresh, reserve

pytestmark = pytest.mark.django_db


def _replayed(tenant, read_file) -> IdempotencyRecord:
    """A read whose first holder (token 1) went uncertain and was replaced by a replay
    (token 2), which holds the record now."""
    first = reserve(tenant, read_file, key="k-read")
    complete_execution(record=first.record, fencing_token=1, outcome=Outcome.UNCERTAIN, actor="w")
    replay = reserve(tenant, read_file, key="k-read", owner="w2")
    assert replay.record.fencing_token == 2
    return replay.record


def _refusals(record: IdempotencyRecord) -> int:
    return AuditEvent.objects.filter(
        action="record.complete_refused", outcome="denied", target_id=str(record.pk)
    ).count()


@pytest.mark.parametrize("token", [0, 2, 99])
def test_a_report_with_a_token_that_is_not_the_current_one_is_refused(
    tenant, create_order, token: int
) -> None:
    record = reserve(tenant, create_order).record
    with pytest.raises(StaleFencingToken):
        complete_execution(
            record=record, fencing_token=token, outcome=Outcome.SUCCEEDED, actor="w", result={}
        )
    after = refresh(record)
    assert (after.state, after.result, after.fencing_token) == (RecordState.EXECUTING, None, 1)
    assert _refusals(record) == 1


def test_the_replaced_holder_cannot_report_the_outcome_the_new_holder_reported(
    tenant, read_file
) -> None:
    """The same outcome again is answered from the record only for the token that reported
    it; from the holder a replay replaced it is refused like any other stale report."""
    record = _replayed(tenant, read_file)
    complete_execution(
        record=record, fencing_token=2, outcome=Outcome.SUCCEEDED, actor="w2", result={"n": 2}
    )
    with pytest.raises(StaleFencingToken):
        complete_execution(
            record=record, fencing_token=1, outcome=Outcome.SUCCEEDED, actor="w", result={"n": 1}
        )
    assert refresh(record).result == {"n": 2}
    assert _refusals(record) == 1


def test_the_replaced_holder_cannot_settle_the_record_after_a_replay(tenant, read_file) -> None:
    record = _replayed(tenant, read_file)
    for outcome in (Outcome.SUCCEEDED, Outcome.FAILED, Outcome.UNCERTAIN):
        with pytest.raises(StaleFencingToken):
            complete_execution(
                record=record, fencing_token=1, outcome=outcome, actor="w", error={"code": "X"}
            )
    after = refresh(record)
    assert (after.state, after.lease_owner, after.fencing_token) == (
        RecordState.EXECUTING,
        "w2",
        2,
    )
    assert _refusals(record) == 3


@pytest.mark.parametrize("token", [1, 3])
def test_a_heartbeat_with_a_token_that_is_not_the_current_one_is_refused(
    tenant, read_file, token: int
) -> None:
    record = _replayed(tenant, read_file)
    lease = refresh(record).lease_expires_at
    with pytest.raises(StaleFencingToken):
        heartbeat(record=record, fencing_token=token, lease_seconds=3600)
    assert refresh(record).lease_expires_at == lease


def test_the_current_holder_keeps_its_lease_and_reports_after_a_refused_stale_one(
    tenant, read_file
) -> None:
    record = _replayed(tenant, read_file)
    with pytest.raises(StaleFencingToken):
        heartbeat(record=record, fencing_token=1)
    heartbeat(record=record, fencing_token=2, lease_seconds=600)
    done = complete_execution(
        record=record, fencing_token=2, outcome=Outcome.SUCCEEDED, actor="w2", result={}
    )
    assert done.state == RecordState.SUCCEEDED


def test_the_replaced_call_is_refused_through_the_api(tenant) -> None:
    api = client_for(tenant)
    api.start_run()
    first = api.call("read_file", {"path": "a.txt"}).json()
    api.post(f"/calls/{first['call_id']}/complete", {"fencing_token": 1, "outcome": "uncertain"})
    replay = api.post(f"/calls/{first['call_id']}/replay", {}).json()
    assert replay["lease"]["fencing_token"] == 2
    for path, body in (
        ("heartbeat", {"fencing_token": 1}),
        ("complete", {"fencing_token": 1, "outcome": "succeeded", "result": {"late": True}}),
    ):
        response = api.post(f"/calls/{first['call_id']}/{path}", body)
        assert response.status_code == 409, path
        assert response.json()["code"] == "STALE_FENCING_TOKEN", path
    # The replay's own token is another call's: the original call cannot borrow it, to report
    # or to keep the lease alive.
    record = IdempotencyRecord.objects.get(tenant=tenant, key=first["idempotency_key"])
    for path, body in (
        ("heartbeat", {"fencing_token": 2}),
        ("complete", {"fencing_token": 2, "outcome": "succeeded", "result": {}}),
    ):
        borrowed = api.post(f"/calls/{first['call_id']}/{path}", body)
        assert borrowed.status_code == 409, path
        assert borrowed.json()["code"] == "STALE_FENCING_TOKEN", path
    assert refresh(record).lease_expires_at == record.lease_expires_at
    done = api.post(
        f"/calls/{replay['call_id']}/complete",
        {"fencing_token": 2, "outcome": "succeeded", "result": {"n": 2}},
    )
    assert done.status_code == 200 and done.json()["record_state"] == "succeeded"
