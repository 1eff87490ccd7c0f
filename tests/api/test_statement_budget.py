"""The hot path's SQL budget, through the real API: at most 3 statements for ``calls`` (and
no transaction) and 3 for ``complete``, token lookup included (docs/performance.md). A
behaviour bound, not a timing: every extra statement is a round trip on every tool call."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from tests.api.conftest import ApiClient

CALLS_BUDGET = 3
COMPLETE_BUDGET = 3
DUPLICATE_BUDGET = 4

# No test transaction around the requests: the API's own transactions are real, as in
# production, so a nested block's SAVEPOINT would be counted too.
pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def started(api: ApiClient) -> ApiClient:
    api.start_run()
    # The first use of a catalogue tool registers it (once per tenant, not the hot path).
    assert api.call("create_order", {"sku": "a"}, business_object_id="o-0").status_code == 200
    return api


def _statements(captured: CaptureQueriesContext) -> list[str]:
    """The SQL the request sends, transaction control (BEGIN/COMMIT) aside: that is counted
    separately in docs/performance.md."""
    return [q["sql"] for q in captured.captured_queries if q["sql"] not in ("BEGIN", "COMMIT")]


def test_calls_stays_within_its_statement_budget(started: ApiClient) -> None:
    with CaptureQueriesContext(connection) as captured:
        response = started.call("create_order", {"sku": "a"}, business_object_id="o-1")
    assert response.status_code == 200
    assert response.json()["decision"] == "execute"
    assert len(_statements(captured)) <= CALLS_BUDGET, _statements(captured)
    # One statement writes the record, its audit event and the entry: atomic by itself.
    sent = [q["sql"] for q in captured.captured_queries]
    assert "BEGIN" not in sent and "COMMIT" not in sent, sent


def test_a_duplicate_is_answered_without_a_transaction(started: ApiClient) -> None:
    first = started.call("create_order", {"sku": "a"}, business_object_id="o-dup")
    with CaptureQueriesContext(connection) as captured:
        again = started.call("create_order", {"sku": "a"}, business_object_id="o-dup")
    assert first.json()["decision"] == "execute"
    assert again.status_code == 409 and again.json()["decision"] == "wait"
    sent = [q["sql"] for q in captured.captured_queries]
    assert "BEGIN" not in sent and "COMMIT" not in sent, sent
    # Token, run and tool, the one-statement way (which finds the key taken and reads its
    # record), then the duplicate counted and its entry written in one statement.
    assert len(_statements(captured)) == DUPLICATE_BUDGET, _statements(captured)
    inserts = [s for s in sent if 'INSERT INTO "ledger_idempotencyrecord"' in s]
    assert len(inserts) == 1, inserts


def test_a_duplicate_that_needs_the_lock_goes_the_transactional_way(started: ApiClient) -> None:
    """A conflict (same key, other input) is audited under the record's lock."""
    started.call("create_order", {"sku": "a"}, business_object_id="o-conflict")
    with CaptureQueriesContext(connection) as captured:
        other = started.call("create_order", {"sku": "b"}, business_object_id="o-conflict")
    assert other.status_code == 422 and other.json()["decision"] == "conflict"
    sent = [q["sql"] for q in captured.captured_queries]
    assert "BEGIN" in sent and "COMMIT" in sent, sent
    assert any("FOR UPDATE" in s for s in sent), sent


def test_complete_stays_within_its_statement_budget(started: ApiClient) -> None:
    call = started.call("create_order", {"sku": "a"}, business_object_id="o-2").json()
    with CaptureQueriesContext(connection) as captured:
        response = started.post(
            f"/calls/{call['call_id']}/complete",
            {
                "fencing_token": call["lease"]["fencing_token"],
                "outcome": "succeeded",
                "result": {"order_id": "o-2"},
            },
        )
    assert response.status_code == 200
    assert response.json()["record_state"] == "succeeded"
    assert len(_statements(captured)) <= COMPLETE_BUDGET, _statements(captured)


BATCH_BUDGET = 3


def test_a_batch_of_new_keys_is_reserved_in_one_statement(started: ApiClient) -> None:
    """A model turn's calls of registered tools with new keys: the token, the run and tool
    looked up once, and one statement that writes every record, audit event and entry."""
    calls = [
        {
            "run_id": "run-1",
            "step_id": f"step-{n}",
            "tool": "create_order",
            "input": {"sku": "a"},
            "business_object_id": f"o-batch-{n}",
        }
        for n in range(8)
    ]
    with CaptureQueriesContext(connection) as captured:
        response = started.post("/calls/batch", {"calls": calls})
    assert response.status_code == 200
    decisions = [item["call"]["decision"] for item in response.json()["results"]]
    assert decisions == ["execute"] * 8
    sent = [q["sql"] for q in captured.captured_queries]
    assert "BEGIN" not in sent and "COMMIT" not in sent, sent
    assert len(_statements(captured)) == BATCH_BUDGET, _statements(captured)
