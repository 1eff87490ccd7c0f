"""The sans-IO protocol on its own: flows fed scripted replies, on a clock of the test's own.

Each test plays the server's side of the contract (the answers ``POST /calls``, ``complete``
and ``heartbeat`` give) and checks what the flow asks its driver to do next.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from agent_ledger_client import InvalidToolInput, LedgerRequestError, ToolError
from agent_ledger_client.protocol import (
    TIMEOUT_HEADER,
    Execute,
    Executed,
    Flow,
    LedgerProtocol,
    Request,
    Response,
    Send,
    Sleep,
    TransportFailure,
    batch_replies,
    batch_request,
    executed_after,
    next_heartbeat,
    response_of,
    without_batches,
)

UNAVAILABLE = Response(503, {"code": "LEDGER_STORE_UNAVAILABLE"}, retry_after=2.0)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _execute_answer(*, lease_seconds: int | None = 30, fencing_token: int = 7) -> Response:
    lease: dict[str, Any] = {"fencing_token": fencing_token, "expires_at": "2000-01-01T00:00:00Z"}
    if lease_seconds is not None:
        lease["seconds"] = lease_seconds
    return Response(
        200,
        {
            "decision": "execute",
            "call_id": "c-1",
            "run_id": "r-1",
            "step_id": "s-1",
            "tool": "create_order",
            "idempotency_key": "agent:acme:u:r-1:create_order:cart-9",
            "lease": lease,
            "observation": None,
        },
    )


class Script:
    """Drives a flow: each ``Send`` gets the next scripted reply, ``Sleep`` moves the clock."""

    def __init__(self, protocol: LedgerProtocol, clock: Clock) -> None:
        self.protocol = protocol
        self.clock = clock
        self.sent: list[Request] = []
        self.slept: list[float] = []
        self.executed: list[Execute] = []

    def run(self, flow: Flow[Any], replies: list[Any], executed: Executed | None = None) -> Any:
        reply: Any = None
        try:
            while True:
                action = flow.send(reply)
                if isinstance(action, Send):
                    self.sent.append(action.request)
                    reply = replies.pop(0) if replies else UNAVAILABLE
                elif isinstance(action, Sleep):
                    self.slept.append(action.seconds)
                    self.clock.now += action.seconds
                    reply = None
                else:
                    self.executed.append(action)
                    reply = executed or Executed("succeeded", {"order": "o-1"})
        except StopIteration as done:
            return done.value


def _protocol(**settings: Any) -> tuple[LedgerProtocol, Script]:
    clock = Clock()
    protocol = LedgerProtocol(clock=clock, **settings)
    return protocol, Script(protocol, clock)


def _call(protocol: LedgerProtocol, tool: str = "create_order", **options: Any) -> Flow[Any]:
    return protocol.call("r-1", tool, {"cart": "cart-9"}, execute=lambda ctx: None, **options)


def test_every_request_says_how_long_its_caller_waits() -> None:
    protocol, script = _protocol(request_timeout=4.0, ledger_budget=3.0)
    script.run(_call(protocol), [UNAVAILABLE, UNAVAILABLE])
    first, *_rest, last = script.sent
    assert first.headers[TIMEOUT_HEADER] == "3000"  # the budget is shorter than the timeout
    assert 0 < int(last.headers[TIMEOUT_HEADER]) < 3000


def test_store_trouble_is_retried_after_retry_after_then_fails_closed() -> None:
    protocol, script = _protocol(request_timeout=5.0, ledger_budget=7.0)
    observation = script.run(_call(protocol), [])
    assert script.executed == []  # create_order is not idempotent: it never runs
    assert observation["code"] == "LEDGER_UNAVAILABLE" and observation["ok"] is False
    assert "503 LEDGER_STORE_UNAVAILABLE" in observation["content"]
    assert all(2.0 <= delay <= 2.5 for delay in script.slept)  # Retry-After plus jitter
    assert len(script.sent) == len(script.slept) + 1 >= 3
    assert sum(script.slept) < 7.0  # within the budget, never past it


def test_a_read_only_tool_runs_without_the_ledger_but_unrecorded() -> None:
    protocol, script = _protocol(ledger_budget=1.0)
    observation = script.run(_call(protocol, tool="read_file"), [])
    assert len(script.executed) == 1 and script.executed[0].heartbeat_every is None
    assert observation["ok"] is True and observation["metadata"]["recorded"] is False


def test_the_ledger_answering_after_a_503_decides_as_usual() -> None:
    protocol, script = _protocol()
    complete = Response(200, {"observation": {"ok": True, "content": {"order": "o-1"}}})
    observation = script.run(_call(protocol), [UNAVAILABLE, _execute_answer(), complete])
    assert len(script.executed) == 1
    assert observation == {"ok": True, "content": {"order": "o-1"}, "metadata": {"replayed": False}}


@pytest.mark.parametrize(("seconds", "every"), [(30, 10.0), (6, 2.0), (None, 20.0)])
def test_the_heartbeat_runs_every_third_of_the_lease_granted(
    seconds: int | None, every: float
) -> None:
    protocol, script = _protocol()
    complete = Response(200, {"observation": {"ok": True, "content": 1}})
    script.run(_call(protocol), [_execute_answer(lease_seconds=seconds), complete])
    assert script.executed[0].heartbeat_every == every


def test_a_heartbeat_answer_resets_the_interval_and_a_refusal_stops_it() -> None:
    assert next_heartbeat(Response(200, {"lease_seconds": 90}), 10.0) == 30.0
    assert next_heartbeat(Response(200, {"lease_expires_at": "..."}), 10.0) == 10.0
    assert next_heartbeat(TransportFailure("reset"), 10.0) == 10.0
    assert next_heartbeat(UNAVAILABLE, 10.0) == 10.0
    assert next_heartbeat(Response(409, {"code": "LEASE_EXPIRED"}), 10.0) is None


def test_complete_is_retried_with_the_same_token_for_the_lease_then_uncertain() -> None:
    protocol, script = _protocol(request_timeout=2.0)
    failures = [TransportFailure("reset"), Response(502, None)] * 50
    observation = script.run(_call(protocol), [_execute_answer(lease_seconds=20), *failures])
    completes = [r for r in script.sent if r.path.endswith("/complete")]
    assert len(completes) > 3
    assert {r.json["fencing_token"] for r in completes} == {7}
    assert {r.json["outcome"] for r in completes} == {"succeeded"}
    assert sum(script.slept) >= 20 - 5  # kept trying for the lease length (less one backoff)
    assert observation["code"] == "SIDE_EFFECT_UNCERTAIN"
    assert observation["metadata"]["recorded"] is False and observation["metadata"]["call_id"]


def test_a_refused_complete_returns_the_servers_observation() -> None:
    protocol, script = _protocol()
    told = {"ok": False, "code": "SIDE_EFFECT_UNCERTAIN", "content": "lease lapsed", "metadata": {}}
    refused = Response(
        409, {"code": "LEASE_EXPIRED", "record_state": "unknown", "observation": told}
    )
    observation = script.run(_call(protocol), [_execute_answer(), refused])
    assert (
        observation["code"] == "SIDE_EFFECT_UNCERTAIN" and observation["content"] == "lease lapsed"
    )
    assert observation["metadata"]["replayed"] is False


def test_a_refused_complete_without_observation_is_uncertain_not_an_exception() -> None:
    protocol, script = _protocol()
    refused = Response(409, {"code": "STALE_FENCING_TOKEN"})
    observation = script.run(_call(protocol), [_execute_answer(), refused])
    assert observation["code"] == "SIDE_EFFECT_UNCERTAIN"


def test_a_cancelled_call_reports_uncertain_briefly_and_never_replays() -> None:
    protocol, script = _protocol(request_timeout=10.0)
    answer = _execute_answer()
    replay_next = Response(
        200, {"observation": {"ok": False, "metadata": {"next_action": "replay"}}}
    )
    cancelled = Executed("uncertain", cancelled=True)
    observation = script.run(_call(protocol), [answer, replay_next], executed=cancelled)
    assert [r.path for r in script.sent] == ["/calls", "/calls/c-1/complete"]
    assert script.sent[1].json["outcome"] == "uncertain"
    assert int(script.sent[1].headers[TIMEOUT_HEADER]) <= 2000
    assert observation["metadata"]["next_action"] == "replay"


def test_a_cancelled_report_gives_up_within_two_seconds() -> None:
    protocol, script = _protocol(request_timeout=10.0)
    cancelled = Executed("uncertain", cancelled=True)
    script.run(_call(protocol), [_execute_answer()], executed=cancelled)
    assert sum(script.slept) <= 2.0


@pytest.mark.parametrize(
    ("error", "outcome", "cancelled", "retryable"),
    [
        (ToolError("PERMISSION_DENIED", "no"), "failed", False, False),
        (ToolError("RATE_LIMITED", "later", retryable=True), "failed", False, True),
        (InvalidToolInput("cart is required"), "failed", False, True),
        (TimeoutError("downstream"), "uncertain", False, None),
        (ConnectionResetError("lost"), "uncertain", False, None),
        (ValueError("bug in the tool"), "uncertain", False, None),
        (asyncio.CancelledError(), "uncertain", True, None),
        (KeyboardInterrupt(), "uncertain", True, None),
    ],
)
def test_how_a_raised_tool_ended(
    error: BaseException, outcome: str, cancelled: bool, retryable: bool | None
) -> None:
    done = executed_after(error)
    assert (done.outcome, done.cancelled) == (outcome, cancelled)
    assert (done.error.retryable if done.error else None) == retryable


def test_an_approval_is_not_awaited_in_non_blocking_mode() -> None:
    protocol, script = _protocol()
    asked = Response(
        200,
        {
            "decision": "approval_required",
            "call_id": "c-1",
            "observation": {"ok": False, "code": "APPROVAL_REQUIRED", "metadata": {}},
        },
    )
    observation = script.run(_call(protocol, wait_for_approval=False), [asked])
    assert observation["code"] == "APPROVAL_REQUIRED"
    assert len(script.sent) == 1 and script.slept == []


def test_an_approval_wait_is_bounded() -> None:
    protocol, script = _protocol()
    pending = {
        "decision": "approval_required",
        "call_id": "c-1",
        "approval_state": "pending",
        "observation": {"ok": False, "code": "APPROVAL_REQUIRED", "metadata": {}},
    }
    polls = [Response(200, pending)] * 200
    observation = script.run(
        _call(protocol, approval_deadline=10), [Response(200, pending), *polls]
    )
    assert observation["code"] == "APPROVAL_REQUIRED"
    assert 9.0 <= sum(script.slept) <= 10.0 + 1e-9  # never past the deadline (float sums)


def test_bad_input_raises_and_runs_nothing() -> None:
    protocol, script = _protocol()
    with pytest.raises(LedgerRequestError) as raised:
        script.run(_call(protocol), [Response(400, {"code": "INVALID_INPUT", "detail": "x"})])
    assert raised.value.status == 400 and script.executed == []


def test_a_driver_reads_retry_after_and_non_json_bodies() -> None:
    answer = response_of(503, {"Retry-After": "3"}, b"<html>busy</html>")
    assert answer.retry_after == 3.0 and answer.body["code"] == "HTTP_ERROR"
    assert response_of(200, {}, b'{"a": 1}') == Response(200, {"a": 1}, None)


def test_ask_sends_the_call_and_executes_nothing() -> None:
    protocol, script = _protocol()
    flow = protocol.ask("r-1", "create_order", {"cart": "cart-9"}, step_id="s-1")
    answer = script.run(flow, [_execute_answer()])
    assert answer == _execute_answer() and script.executed == []
    (request,) = script.sent
    assert (request.method, request.path) == ("POST", "/calls")
    assert request.json["step_id"] == "s-1" and request.json["input"] == {"cart": "cart-9"}


def test_a_call_continues_from_the_answer_it_is_given() -> None:
    protocol, script = _protocol()
    complete = Response(200, {"observation": {"ok": True, "content": {"order": "o-1"}}})
    observation = script.run(_call(protocol, answer=_execute_answer()), [complete])
    assert [request.path for request in script.sent] == ["/calls/c-1/complete"]
    assert len(script.executed) == 1 and script.executed[0].context.fencing_token == 7
    assert observation["content"] == {"order": "o-1"}


def test_a_replay_waits_for_the_approval_it_asked_for_on_a_failed_record() -> None:
    """A replay of a call that failed without effect is put to a human: its record stays
    ``failed_final`` while the approval is pending, and the replay waits for the decision."""
    protocol, script = _protocol()
    asked = {
        "decision": "approval_required",
        "call_id": "c-1",
        "approval_state": "pending",
        "record_state": "failed_final",
        "observation": {"ok": False, "code": "APPROVAL_REQUIRED", "metadata": {}},
    }
    approved = {**asked, "approval_state": "approved"}
    complete = Response(200, {"observation": {"ok": True, "content": {"order": "o-1"}}})
    flow = protocol.replay("c-1", {"cart": "cart-9"}, execute=lambda ctx: None)
    observation = script.run(
        flow,
        [
            Response(200, asked),
            Response(200, asked),  # the approver has not decided yet
            Response(200, approved),
            _execute_answer(),  # the start
            complete,
        ],
    )
    assert observation["ok"] is True, observation
    assert [r.path for r in script.sent] == [
        "/calls/c-1/replay",
        "/calls/c-1",
        "/calls/c-1",
        "/calls/c-1/start",
        "/calls/c-1/complete",
    ]
    assert script.sent[3].json == {"input": {"cart": "cart-9"}} and len(script.executed) == 1


def test_a_held_call_resumed_with_other_input_runs_nothing() -> None:
    """A runtime that paused for an approval resumes the held call by its id; an input other
    than the approved action's is refused by the ledger (422), and nothing runs."""
    protocol, script = _protocol()
    approved = {
        "call_id": "c-1",
        "tool": "create_order",
        "approval_state": "approved",
        "record_state": "reserved",
        "observation": {"ok": False, "code": "APPROVAL_REQUIRED", "metadata": {}},
    }
    conflict = Response(422, {"code": "IDEMPOTENCY_KEY_CONFLICT", "detail": "another input"})
    flow = protocol.resume("c-1", {"amount": 5000}, execute=lambda ctx: None)
    observation = script.run(flow, [Response(200, approved), Response(200, approved), conflict])
    assert observation["code"] == "IDEMPOTENCY_KEY_CONFLICT" and observation["ok"] is False
    assert "NOT executed" in observation["content"] and script.executed == []
    assert script.sent[-1].path == "/calls/c-1/start"
    assert script.sent[-1].json == {"input": {"amount": 5000}}


# --- a turn's calls in one batch ----------------------------------------------------------


def test_a_batch_carries_its_calls_and_waits_as_long_as_the_least_patient() -> None:
    asks = [
        Request("POST", "/calls", {"step_id": "a"}, None, 4.0, "00-t-s-01"),
        Request("POST", "/calls", {"step_id": "b"}, None, 2.5, "00-t-s-01"),
    ]
    batch = batch_request(asks)
    assert (batch.method, batch.path) == ("POST", "/calls/batch")
    assert batch.json == {"calls": [{"step_id": "a"}, {"step_id": "b"}]}
    assert batch.timeout == 2.5 and batch.headers["traceparent"] == "00-t-s-01"


def test_each_call_gets_its_own_reply_from_the_batch() -> None:
    answer = {"decision": "execute", "call_id": "c-1"}
    problem = {"code": "NOT_FOUND", "status": 404, "detail": "no run"}
    results = [
        {"status": 200, "call": answer, "problem": None, "retry_after": None},
        {"status": 409, "call": {"decision": "wait"}, "problem": None, "retry_after": 1},
        {"status": 404, "call": None, "problem": problem, "retry_after": None},
    ]
    replies = batch_replies(Response(200, {"results": results}), 3)
    assert replies == [
        Response(200, answer, None),
        Response(409, {"decision": "wait"}, 1),
        Response(404, problem, None),
    ]


@pytest.mark.parametrize(
    "reply",
    [UNAVAILABLE, TransportFailure("connection reset"), Response(401, {"code": "UNAUTHENTICATED"})],
    ids=["store trouble", "lost connection", "refused token"],
)
def test_a_batch_that_failed_as_a_whole_is_each_calls_reply(reply: Any) -> None:
    """Each call then retries (or is refused) exactly as it would have been alone."""
    assert batch_replies(reply, 2) == [reply, reply]


@pytest.mark.parametrize(
    "reply",
    [
        Response(405, {"detail": "Method not allowed"}),
        Response(404, {"code": "NOT_FOUND"}),
        Response(400, {"code": "INVALID_INPUT"}),
        Response(413, {"code": "PAYLOAD_TOO_LARGE"}),
        Response(200, {"results": []}),
        Response(200, "not a batch"),
        Response(200, {"results": [{"status": 200}, None]}),
    ],
    ids=["no route", "not found", "refused whole", "too large", "short", "garbage", "bad item"],
)
def test_a_batch_refused_as_such_sends_each_call_alone(reply: Response) -> None:
    assert batch_replies(reply, 2) is None
    assert without_batches(reply) is (reply.status in (404, 405))
