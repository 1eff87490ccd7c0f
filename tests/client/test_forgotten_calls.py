"""A ledger that lost data (a failover to a standby without its last commits) cannot make a
runtime run an action twice: the protocol remembers the keys it ran, with their fencing
tokens. A report answered 404 for a call it ran marks that key for good; an ``execute`` for a
key it ran, under a token no higher (a record made anew), is reported uncertain and not run.
The drill ``failover_async`` shows it against a real failover."""

from __future__ import annotations

from agent_ledger_client.protocol import RAN_KEYS, CallContext, Response
from tests.client.test_protocol import _call, _execute_answer, _protocol

NO_CALL = Response(404, {"code": "NOT_FOUND", "detail": "No such call."})
DONE = Response(200, {"observation": {"ok": True, "content": {"order": "o-1"}}})
UNKNOWN_NOW = Response(
    200, {"observation": {"ok": False, "code": "SIDE_EFFECT_UNCERTAIN", "metadata": {}}}
)


def test_a_key_whose_report_was_answered_no_call_is_never_run_again() -> None:
    protocol, script = _protocol()
    first = script.run(_call(protocol), [_execute_answer(fencing_token=1), NO_CALL])
    assert first["code"] == "SIDE_EFFECT_UNCERTAIN" and len(script.executed) == 1
    # The ledger, having lost the record, answers the same key "execute" again, even with a
    # higher token: this runtime does not run it, and reports it uncertain.
    again = script.run(_call(protocol), [_execute_answer(fencing_token=2), UNKNOWN_NOW])
    assert len(script.executed) == 1
    assert again["code"] == "SIDE_EFFECT_UNCERTAIN"
    assert again["metadata"]["next_action"] == "lookup"
    assert "NOT run again" in again["content"]
    report = script.sent[-1]
    assert report.path.endswith("/complete") and report.json["outcome"] == "uncertain"
    assert report.json["fencing_token"] == 2


def test_an_execute_under_a_token_already_run_is_not_run_again() -> None:
    """A report that was acknowledged, then lost with the primary: the new record's token
    starts again from 1, no higher than the one this runtime ran under."""
    protocol, script = _protocol()
    script.run(_call(protocol), [_execute_answer(fencing_token=1), DONE])
    again = script.run(_call(protocol), [_execute_answer(fencing_token=1), UNKNOWN_NOW])
    assert len(script.executed) == 1
    assert again["code"] == "SIDE_EFFECT_UNCERTAIN"


def test_an_execute_under_a_higher_token_runs() -> None:
    """A retryable failure or an approved replay: the record's token grew, it is the
    ledger's own decision to run again."""
    protocol, script = _protocol()
    failed = Response(200, {"observation": {"ok": False, "code": "FAILED", "metadata": {}}})
    script.run(_call(protocol), [_execute_answer(fencing_token=1), failed])
    script.run(_call(protocol), [_execute_answer(fencing_token=2), DONE])
    assert len(script.executed) == 2


def test_a_read_only_tool_may_run_again_under_any_token() -> None:
    protocol, script = _protocol()
    answer = _execute_answer(fencing_token=1)
    answer = Response(200, {**answer.body, "tool": "read_file"})
    for _ in range(2):
        script.run(_call(protocol, tool="read_file"), [answer, NO_CALL])
    assert len(script.executed) == 2


def test_the_memory_keeps_the_newest_keys() -> None:
    protocol, _script = _protocol()
    for n in range(RAN_KEYS + 1):
        protocol._remember(f"key-{n}", 1)
    seen = [
        protocol.already_ran(CallContext("c", "r", "s", "t", {}, f"key-{n}", 1))
        for n in (0, 1, RAN_KEYS)
    ]
    assert seen == [False, True, True]
