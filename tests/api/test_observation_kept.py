"""What the model is told with each decision is kept with the call's entry, exactly as the API
gave it (``LedgerEntry.observation``), whichever way the call was answered: the one-statement
duplicate, the general way under the record's lock, an approval request, a replay, a halted
run. A call told to go ahead keeps none. The record may settle later; the kept observation
does not move with it."""

from __future__ import annotations

import hashlib
from typing import Any

import pytest
from django.db.models.functions import Now

from ledger.models import IdempotencyRecord, LedgerEntry, Run
from ledger.records import Outcome, resolve_unknown
from tests.api.conftest import ApiClient

pytestmark = pytest.mark.django_db


def _kept(answer: dict[str, Any]) -> Any:
    return LedgerEntry.objects.get(call_id=answer["call_id"]).observation


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def test_a_call_told_to_go_ahead_keeps_no_observation(api: ApiClient) -> None:
    api.start_run()
    first = api.call("create_order", {"cart": 1}, business_object_id="c-1").json()
    assert first["decision"] == "execute" and first["observation"] is None
    assert _kept(first) is None


def test_each_answer_from_an_existing_record_is_kept_as_given(api: ApiClient) -> None:
    api.start_run()
    order = {"business_object_id": "c-2"}
    first = api.call("create_order", {"cart": 2}, **order).json()
    waiting = api.call("create_order", {"cart": 2}, **order).json()  # the one-statement way
    conflict = api.call("create_order", {"cart": 3}, **order).json()  # under the lock
    api.post(f"/calls/{first['call_id']}/complete", {"fencing_token": 1, "outcome": "uncertain"})
    uncertain = api.call("create_order", {"cart": 2}, **order).json()
    replay = api.post(f"/calls/{first['call_id']}/replay", {}).json()
    answers = {
        "wait": waiting,
        "conflict": conflict,
        "forbidden": uncertain,
        "replay": replay,
    }
    for name, answer in answers.items():
        assert answer["observation"] is not None, name
        assert _kept(answer) == answer["observation"], name
    assert uncertain["observation"]["code"] == "SIDE_EFFECT_UNCERTAIN"
    record = IdempotencyRecord.objects.get(key=first["idempotency_key"])
    resolve_unknown(
        record=record,
        outcome=Outcome.SUCCEEDED,
        actor="worker",
        detail="found downstream",
        result={"order_id": "o-2"},
    )
    assert _kept(uncertain) == uncertain["observation"]  # as given, not as the record is now
    recorded = api.call("create_order", {"cart": 2}, **order).json()
    assert recorded["observation"]["content"] == {"order_id": "o-2"}
    assert _kept(recorded) == recorded["observation"]


def test_an_approval_requests_observation_is_kept_with_its_id(api: ApiClient) -> None:
    api.start_run()
    plan = {
        "workspace": "repo",
        "path": "app.py",
        "before_hash": _sha("old"),
        "after_hash": _sha("new"),
        "diff": "-old\n+new\n",
    }
    first = api.call("write_file", {"path": "app.py"}, write_plan=plan).json()
    api.post(f"/calls/{first['call_id']}/complete", {"fencing_token": 1, "outcome": "uncertain"})
    replay = api.post(f"/calls/{first['call_id']}/replay", {"current_hash": _sha("old")}).json()
    assert replay["decision"] == "approval_required"
    assert replay["observation"]["metadata"]["approval_id"] is not None
    assert _kept(replay) == replay["observation"]
    duplicate = api.call("write_file", {"path": "app.py"}, write_plan=plan).json()
    assert duplicate["decision"] == "approval_required"
    assert _kept(duplicate) == duplicate["observation"]


def test_a_halted_runs_refusal_is_kept(api: ApiClient) -> None:
    api.start_run()
    Run.objects.filter(run_id="run-1").update(status=Run.Status.HALTED, finished_at=Now())
    refused = api.call("create_order", {"cart": 4}, business_object_id="c-4").json()
    assert refused["observation"]["code"] == "RUN_HALTED"
    assert _kept(refused) == refused["observation"]
