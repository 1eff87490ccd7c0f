"""Retry storms through the API, on real connections (one per thread): a duplicate is answered
from its record as read, without the record's lock, yet exactly one caller executes, and
every duplicate is counted and entered once with the answer that held when it was counted."""

from __future__ import annotations

import threading
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from django.db import connections

from ledger.models import AuditEvent, IdempotencyRecord, LedgerEntry, Tool
from tests.api.conftest import ApiClient

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

BODY = {"sku": "a"}


def _in_threads(api: ApiClient, callers: int, work) -> list[Any]:
    barrier = threading.Barrier(callers)

    def run(index: int) -> Any:
        own = ApiClient(api.tenant, api.token)  # a client (and a connection) per thread
        try:
            barrier.wait(timeout=30)
            return work(own, index)
        finally:
            connections.close_all()

    with ThreadPoolExecutor(max_workers=callers) as pool:
        return list(pool.map(run, range(callers)))


@pytest.fixture
def started(api: ApiClient) -> ApiClient:
    api.start_run()
    # The first use of a catalogue tool registers it (the test below storms that too).
    assert api.call("create_order", BODY, business_object_id="o-0").status_code == 200
    return api


def test_a_storm_on_a_new_key_executes_once(started: ApiClient) -> None:
    api = started
    callers = 24
    answers = _in_threads(
        api, callers, lambda own, _i: own.call("create_order", BODY, business_object_id="o-1")
    )
    decisions = Counter(a.json()["decision"] for a in answers)
    assert decisions == {"execute": 1, "wait": callers - 1}, decisions
    assert all(a.status_code == 409 for a in answers if a.json()["decision"] == "wait")
    record = IdempotencyRecord.objects.get(tenant=api.tenant, key__endswith=":o-1")
    assert (record.executions, record.duplicate_hits) == (1, callers - 1)
    assert LedgerEntry.objects.filter(record=record).count() == callers


def test_a_storm_while_the_call_completes_never_executes_again(started: ApiClient) -> None:
    """Duplicates keep coming while the executing call reports its result: each is answered
    ``wait`` (the record still executing when it was counted) or with the recorded result."""
    api = started
    first = api.call("create_order", BODY, business_object_id="o-2").json()
    assert first["decision"] == "execute"
    callers, each = 12, 6
    completed = threading.Event()

    def storm(own: ApiClient, index: int) -> list[dict[str, Any]]:
        answers = []
        for n in range(each):
            if index == 0 and n == each // 2:  # one thread completes the call mid-storm
                done = own.post(
                    f"/calls/{first['call_id']}/complete",
                    {
                        "fencing_token": first["lease"]["fencing_token"],
                        "outcome": "succeeded",
                        "result": {"order_id": "o-2"},
                    },
                )
                assert done.status_code == 200, done.content
                completed.set()
            response = own.call("create_order", BODY, business_object_id="o-2")
            answers.append({**response.json(), "http": response.status_code})
        return answers

    answers = [a for batch in _in_threads(api, callers, storm) for a in batch]
    assert completed.is_set()
    kinds = Counter((a["decision"], a["record_state"], a["http"]) for a in answers)
    assert set(kinds) <= {("wait", "executing", 409), ("recorded_result", "succeeded", 200)}, kinds
    assert kinds[("recorded_result", "succeeded", 200)] >= each - each // 2  # after completing
    for answer in answers:
        if answer["decision"] == "recorded_result":
            assert answer["observation"]["content"] == {"order_id": "o-2"}
    record = IdempotencyRecord.objects.get(tenant=api.tenant, key__endswith=":o-2")
    assert (record.executions, record.duplicate_hits) == (1, callers * each)
    entries = LedgerEntry.objects.filter(record=record)
    assert entries.count() == 1 + callers * each
    assert Counter(e.decision for e in entries) == {
        "execute": 1,
        "wait": kinds[("wait", "executing", 409)],
        "recorded_result": kinds[("recorded_result", "succeeded", 200)],
    }


@pytest.mark.parametrize("same_key", [True, False])
def test_agents_using_a_catalogue_tool_for_the_first_time_at_once(
    api: ApiClient, same_key: bool
) -> None:
    """The first use of a catalogue tool registers it. Many first uses at once register it
    once, and every caller gets its answer: none of the insert's losers gets a 500, and none
    locks the committed row for an update (which would deadlock against the others)."""
    api.start_run()
    callers = 16
    answers = _in_threads(
        api,
        callers,
        lambda own, i: own.call(
            "send_email", {"to": "a@example.org"}, business_object_id="m" if same_key else f"m{i}"
        ),
    )
    assert sorted(a.status_code for a in answers) == (
        [200] + [409] * (callers - 1) if same_key else [200] * callers
    ), [a.content for a in answers if a.status_code >= 500]
    assert Tool.objects.filter(tenant=api.tenant, name="send_email").count() == 1
    registered = AuditEvent.objects.filter(tenant=api.tenant, action="tool.registered")
    assert registered.count() == 1
