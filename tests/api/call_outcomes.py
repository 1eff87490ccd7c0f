"""Calls that end every way a decision can, each sent in a trace of its own, for the tracing
tests to read back: which spans must carry ``error.type`` (and which value) and an error
status, and which must not.

``drive`` speaks to the API through ``post`` (path under ``/api/v1``, JSON body, headers), so
the same calls run in-process (``tests/api/test_tracing.py``) and against a real server
exporting over OTLP (``tests/api/test_tracing_export.py``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

#: ``post(path, body, headers)``: the response, with ``status_code`` and ``json()``.
Post = Callable[[str, dict[str, Any], dict[str, str]], Any]


@dataclass(frozen=True)
class Traced:
    """One request sent in its own trace: what it was, and the ``error.type`` its span must
    carry (None: no error on the span)."""

    what: str
    trace_id: int
    status: int
    error_type: str | None


class Calls:
    """Sends calls, each with a ``traceparent`` of a trace of its own."""

    def __init__(self, post: Post) -> None:
        self.post = post
        self.sent: list[Traced] = []

    def send(
        self, what: str, path: str, body: dict[str, Any], *, status: int, error_type: str | None
    ) -> Any:
        trace_id = len(self.sent) + 0x1000
        traceparent = f"00-{trace_id:032x}-{1:016x}-01"
        response = self.post(path, body, {"traceparent": traceparent})
        assert response.status_code == status, (what, response.content)
        self.sent.append(Traced(what, trace_id, status, error_type))
        return response.json()

    def call(
        self,
        what: str,
        cart: str,
        *,
        status: int = 200,
        error_type: str | None = None,
        run_id: str = "run-1",
        **input: Any,
    ) -> Any:
        body = {
            "run_id": run_id,
            "step_id": f"step-{len(self.sent)}",
            "tool": "create_order",
            "input": {"cart": cart, **input},
            "business_object_id": cart,
        }
        return self.send(what, "/calls", body, status=status, error_type=error_type)

    def complete(
        self,
        what: str,
        answer: dict[str, Any],
        *,
        status: int = 200,
        error_type: str | None = None,
        token: int | None = None,
        **report: Any,
    ) -> Any:
        body = {"fencing_token": token or answer["lease"]["fencing_token"], **report}
        path = f"/calls/{answer['call_id']}/complete"
        return self.send(what, path, body, status=status, error_type=error_type)


def drive(post: Post) -> list[Traced]:
    """Every kind of ending, through the API: go-aheads, recorded successes, waits and pauses
    (no error), and failed, uncertain, refused and conflicting calls (errors). The run ``run-1``
    is started; ``halted-run`` is started here under a combination that is then halted."""
    calls = Calls(post)

    ordered = calls.call("execute", "c1")
    calls.complete("reported success", ordered, outcome="succeeded", result={"id": "o1"})
    calls.call("recorded success", "c1")
    executing = calls.call("execute, held", "c2")
    calls.call("wait", "c2", status=409)
    calls.call("approval required", "c3", amount=500)

    failing = calls.call("execute, will fail", "c4")
    calls.complete(
        "reported failure",
        failing,
        outcome="failed",
        error={"code": "card_declined", "message": "declined"},
        error_type="FAILED",
    )
    calls.call("retry of a final failure", "c4", error_type="FAILED")
    lost = calls.call("execute, will be lost", "c5")
    calls.complete(
        "reported uncertain", lost, outcome="uncertain", error_type="SIDE_EFFECT_UNCERTAIN"
    )
    calls.call("retry of an uncertain call", "c5", error_type="SIDE_EFFECT_UNCERTAIN")
    calls.send(
        "replay with another input",
        f"/calls/{lost['call_id']}/replay",
        {"input": {"cart": "c5", "amount": 2}},
        status=422,
        error_type="IDEMPOTENCY_KEY_CONFLICT",
    )
    calls.call(
        "same key, other parameters",
        "c1",
        amount=2,
        status=422,
        error_type="IDEMPOTENCY_KEY_CONFLICT",
    )
    calls.complete(
        "stale fencing token",
        executing,
        token=executing["lease"]["fencing_token"] + 7,
        outcome="succeeded",
        result={"id": "o2"},
        status=409,
        error_type="STALE_FENCING_TOKEN",
    )
    calls.call("call in a halted run", "c6", run_id="halted-run", error_type="RUN_HALTED")
    return calls.sent


def prepare(post: Callable[[str, dict[str, Any]], Any]) -> None:
    """What ``drive`` needs: ``run-1``, an approval policy on orders over 100, and the run
    ``halted-run`` under a combination halted since it started."""
    assert post("/runs", {"run_id": "run-1", "user_id": "u1"}).status_code in (200, 201)
    policy = {
        "name": "large orders",
        "reason": "money leaves",
        "tool": "create_order",
        "path": "amount",
        "operator": "gt",
        "value": 100,
    }
    assert post("/approval-policies", policy).status_code in (200, 201)
    versions = {"model": "m", "prompt": "p", "rules": "r", "tool_schema": "t", "data_version": "d"}
    combination = post("/combinations", {"label": "halting", **versions}).json()
    assert post(f"/combinations/{combination['id']}/activate", {}).status_code == 200
    assert post("/runs", {"run_id": "halted-run", "user_id": "u1"}).status_code in (200, 201)
    halted = post(f"/combinations/{combination['id']}/halt", {"reason": "bad"})
    assert halted.status_code == 200, halted.content
