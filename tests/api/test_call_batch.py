"""``POST /calls/batch``: the tool calls of one model turn in one request, each decided exactly
as it would be alone."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from console.models import SecurityEvent
from ledger.api.schemas import MAX_BATCH_CALLS
from ledger.models import IdempotencyRecord, LedgerEntry, Run
from ledger.services.registry import ensure_catalogue_tool
from tests.api.conftest import ApiClient, client_for, locked_elsewhere
from tests.factories import make_tenant

pytestmark = pytest.mark.django_db

# The decision table's inputs: tools of each class (non-idempotent, idempotent, conditional,
# destructive), two business objects and none (the key from the arguments), two inputs for
# one key (a conflict), steps that repeat (a retry), and a run that does not exist.
TOOLS = ["create_order", "get_order_status", "update_config", "charge_customer", "run_migration"]
calls = st.fixed_dictionaries(
    {
        "run_id": st.sampled_from(["run-1", "run-1", "run-1", "no-such-run"]),
        "step_id": st.sampled_from(["s1", "s2", "s3"]),
        "tool": st.sampled_from(TOOLS),
        "input": st.sampled_from([{"v": 1}, {"v": 2}]),
        "business_object_id": st.sampled_from(["a", "b", None]),
    }
)
ASKING = {
    "name": "large orders",
    "reason": "orders over 1 need a second look",
    "tool": "create_order",
    "path": "v",
    "operator": "gt",
    "value": 1,
}
# How an earlier call of the history ended, when it ran.
OUTCOMES = ["succeeded", "uncertain", "failed", "left running"]


def _body(call: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in call.items() if v is not None}


def _decision(status: int, answer: dict[str, Any], retry_after: Any) -> tuple[Any, ...]:
    """What a decision is, without the ids that differ from one tenant to another."""
    if "code" in answer:  # a refusal: the whole problem document
        return (status, retry_after, answer)
    observation = answer.get("observation") or {}
    metadata = observation.get("metadata", {})
    return (
        status,
        retry_after,
        answer["decision"],
        answer["status"],
        answer["record_state"],
        observation.get("code"),
        metadata.get("next_action"),
        metadata.get("retryable"),
        answer["classification"]["idempotency"],
        answer["lease"]["fencing_token"] if answer["lease"] else None,
        answer["approval_state"],
    )


def _live_through(api: ApiClient, history: list[tuple[dict[str, Any], str]]) -> None:
    """The same history in a tenant: each call sent alone, and ended as told when it ran."""
    api.start_run()
    for call, outcome in history:
        answer = api.post("/calls", _body(call)).json()
        if answer.get("decision") != "execute" or outcome == "left running":
            continue
        report: dict[str, Any] = {"fencing_token": answer["lease"]["fencing_token"]}
        if outcome == "succeeded":
            report |= {"outcome": "succeeded", "result": {"done": call["input"]}}
        elif outcome == "failed":
            report |= {"outcome": "failed", "error": {"code": "DOWN"}, "retryable": True}
        else:
            report |= {"outcome": "uncertain"}
        done = api.post(f"/calls/{answer['call_id']}/complete", report)
        assert done.status_code == 200, done.content


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    history=st.lists(st.tuples(calls, st.sampled_from(OUTCOMES)), max_size=5),
    batch=st.lists(calls, min_size=1, max_size=8),
    registered=st.booleans(),
    asking=st.booleans(),
)
# A turn of registered tools under a policy that asks before one of them: the calls around the
# asked one go in one statement, and the asked one is held.
@example(
    history=[],
    batch=[
        {"run_id": "run-1", "step_id": f"s{n}", "tool": tool, "input": {"v": v}, **extra}
        for n, (tool, v, extra) in enumerate(
            [
                ("create_order", 1, {"business_object_id": "a"}),
                ("create_order", 2, {"business_object_id": "b"}),
                ("charge_customer", 1, {"business_object_id": None}),
                ("create_order", 1, {"business_object_id": "a"}),
            ]
        )
    ],
    registered=True,
    asking=True,
)
def test_a_batch_decides_each_call_as_the_same_calls_sent_one_by_one(
    history: list[tuple[dict[str, Any], str]],
    batch: list[dict[str, Any]],
    registered: bool,
    asking: bool,
) -> None:
    """Each tenant's tools registered before (the batch's one-statement way) or by their first
    use, and a policy that asks a human before an order of ``v`` over 1, or none."""
    alone, together = client_for(make_tenant()), client_for(make_tenant())
    for api in (alone, together):
        for tool in TOOLS if registered else []:
            ensure_catalogue_tool(tenant=api.tenant, name=tool, actor="test", source="api")
        if asking:
            api.post("/approval-policies", ASKING)
        _live_through(api, history)
    one_by_one = []
    for call in batch:
        response = alone.post("/calls", _body(call))
        retry_after = response.get("Retry-After")
        one_by_one.append(
            _decision(response.status_code, response.json(), retry_after and int(retry_after))
        )
    response = together.post("/calls/batch", {"calls": [_body(call) for call in batch]})
    assert response.status_code == 200, response.content
    results = response.json()["results"]
    in_batch = [
        _decision(item["status"], item["call"] or item["problem"], item["retry_after"])
        for item in results
    ]
    assert in_batch == one_by_one
    assert _records(alone) == _records(together)


def _records(api: ApiClient) -> list[tuple[str, int, int]]:
    records = IdempotencyRecord.objects.filter(tenant=api.tenant)
    return sorted(records.values_list("state", "executions", "duplicate_hits"))


def test_two_calls_of_one_action_in_a_batch_execute_once(api: ApiClient) -> None:
    api.start_run()
    order = {"run_id": "run-1", "tool": "create_order", "input": {"cart": "c-1"}}
    response = api.post(
        "/calls/batch",
        {
            "calls": [
                {**order, "step_id": "s1", "business_object_id": "cart-1"},
                {**order, "step_id": "s2", "business_object_id": "cart-1"},
                {**order, "step_id": "s3", "business_object_id": "cart-2"},
            ]
        },
    )
    results = response.json()["results"]
    assert [(r["status"], r["call"]["decision"]) for r in results] == [
        (200, "execute"),
        (409, "wait"),
        (200, "execute"),
    ]
    assert [r["call"]["step_id"] for r in results] == ["s1", "s2", "s3"]
    assert IdempotencyRecord.objects.filter(tenant=api.tenant).count() == 2
    assert LedgerEntry.objects.filter(tenant=api.tenant).count() == 3


def test_a_refused_call_has_its_problem_in_its_place_and_the_others_are_decided(
    api: ApiClient, other_api: ApiClient
) -> None:
    api.start_run()
    other_api.start_run("theirs")
    call = {"tool": "create_order", "input": {"cart": "c-1"}, "business_object_id": "cart-1"}
    response = api.post(
        "/calls/batch",
        {
            "calls": [
                {**call, "run_id": "theirs", "step_id": "s1"},  # another tenant's run
                {**call, "run_id": "run-1", "step_id": "s2"},
            ]
        },
    )
    assert response.status_code == 200
    refused, decided = response.json()["results"]
    assert refused["status"] == 404 and refused["call"] is None
    assert refused["problem"]["code"] == "NOT_FOUND"
    alone = api.post("/calls", {**call, "run_id": "theirs", "step_id": "s1"})
    assert refused["problem"] == alone.json()
    assert decided["status"] == 200 and decided["call"]["decision"] == "execute"
    assert not LedgerEntry.objects.filter(tenant=other_api.tenant).exists()
    assert not Run.objects.filter(tenant=api.tenant, run_id="theirs").exists()
    # Each refusal is in the security log, the one in the batch as the one sent alone.
    kept = SecurityEvent.objects.filter(action="api.denied").order_by("pk")
    assert [(e.reason, e.tenant_id, e.facts["path"]) for e in kept] == [
        ("not_found", api.tenant.pk, "/api/v1/calls/batch"),
        ("not_found", api.tenant.pk, "/api/v1/calls"),
    ]


@pytest.mark.parametrize("registered", [True, False], ids=["registered", "first use"])
def test_past_the_callers_deadline_no_call_of_the_batch_is_reserved(
    api: ApiClient, registered: bool
) -> None:
    api.start_run()
    if registered:  # the calls go together, in one statement, which is not sent
        ensure_catalogue_tool(tenant=api.tenant, name="create_order", actor="test", source="api")
    body = {
        "calls": [
            {"run_id": "run-1", "step_id": f"s{n}", "tool": "create_order", "input": {"n": n}}
            for n in range(3)
        ]
    }
    response = api.client.post(
        "/api/v1/calls/batch",
        data=body,
        content_type="application/json",
        headers={"Authorization": f"Bearer {api.token}", "X-Ledger-Timeout-Ms": "0"},
        secure=True,
    )
    assert [r["problem"]["code"] for r in response.json()["results"]] == ["DEADLINE_EXCEEDED"] * 3
    assert [(r["status"], r["retry_after"]) for r in response.json()["results"]] == [(503, 1)] * 3
    assert not IdempotencyRecord.objects.exists()


@pytest.mark.parametrize(
    ("calls", "where"),
    [
        ([], "calls"),
        (
            [{"run_id": "run-1", "step_id": "s", "tool": "create_order"}] * (MAX_BATCH_CALLS + 1),
            "calls",
        ),
        (
            [
                {"run_id": "run-1", "step_id": "s1", "tool": "create_order"},
                {"run_id": "run-1", "step_id": "s2", "tool": "create_order", "colour": "red"},
            ],
            "calls.1.colour",
        ),
    ],
    ids=["empty", "too-many", "one-malformed"],
)
def test_a_batch_that_does_not_validate_changes_nothing(
    api: ApiClient, calls: list[dict[str, Any]], where: str
) -> None:
    api.start_run()
    response = api.post("/calls/batch", {"calls": calls})
    assert response.status_code == 400
    problem = response.json()
    assert problem["code"] == "INVALID_INPUT" and problem["detail"].startswith(where)
    assert not LedgerEntry.objects.exists() and not IdempotencyRecord.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_store_trouble_answers_that_call_and_the_rest_and_keeps_the_answers_reserved(
    api: ApiClient,
) -> None:
    """A duplicate whose record another connection holds locked meets the lock timeout: it is
    answered the 503 it would get alone and the calls after it are not tried, while the calls
    reserved before it, and with it in one statement, keep their answers, lease and all."""
    api.start_run()
    first = api.call("create_order", {"cart": "c-1"}, business_object_id="cart-1").json()
    assert first["decision"] == "execute"
    record = IdempotencyRecord.objects.get()
    order = {"run_id": "run-1", "tool": "create_order"}

    def cart(n: int) -> dict[str, Any]:
        return {
            **order,
            "step_id": f"s{n}",
            "input": {"cart": f"c-{n}"},
            "business_object_id": f"cart-{n}",
        }

    with locked_elsewhere(record):
        # cart-2, cart-1 and cart-3 go in one statement, which finds cart-1 taken: it is then
        # decided alone, under the lock. cart-2 again is a retry, decided after them: not tried.
        response = api.post("/calls/batch", {"calls": [cart(2), cart(1), cart(3), cart(2)]})
    assert response.status_code == 200
    before, locked, reserved_with_it, after = response.json()["results"]
    for kept in (before, reserved_with_it):
        assert kept["call"]["decision"] == "execute" and kept["call"]["lease"]["fencing_token"] == 1
    for refused in (locked, after):
        assert refused["status"] == 503 and refused["retry_after"] >= 1
        assert refused["problem"]["code"] == "LEDGER_STORE_UNAVAILABLE"
        assert refused["problem"]["reason"] == "lock_timeout"
    keys = IdempotencyRecord.objects.values_list("key", flat=True)
    assert sorted(key.rsplit(":", 1)[1] for key in keys) == ["cart-1", "cart-2", "cart-3"]
    assert not IdempotencyRecord.objects.filter(duplicate_hits__gt=0).exists()
    # The calls reserved were recorded with the answers they were given: each can complete.
    for kept in (before, reserved_with_it):
        done = api.post(
            f"/calls/{kept['call']['call_id']}/complete",
            {"fencing_token": 1, "outcome": "succeeded", "result": {"order": "o-2"}},
        )
        assert done.status_code == 200
