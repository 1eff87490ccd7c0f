"""The decision tables of DESIGN sections 3-5."""

from __future__ import annotations

import pytest

from ledger.decisions import (
    RecoveryAction,
    WriteCheck,
    WriteCheckAction,
    answer_existing_record,
    answer_write_check,
    check_write_plan,
    failure_is_final,
    recovery_decision,
)
from ledger.domain import Decision, EscalationKind, ObservationCode, RecordState, ReplayPolicy

AUTO, ASK, NEVER = ReplayPolicy.AUTO, ReplayPolicy.ASK, ReplayPolicy.NEVER


def _answer(state: RecordState, policy: ReplayPolicy = NEVER, **kwargs: object):
    args = {
        "fingerprint_matches": True,
        "awaiting_approval": False,
        "error_code": None,
        "error_retryable": False,
        **kwargs,
    }
    return answer_existing_record(state=state, replay_policy=policy, **args)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("state", "policy", "extra", "decision", "code"),
    [
        (RecordState.RESERVED, NEVER, {}, Decision.WAIT, ObservationCode.IN_PROGRESS),
        (
            RecordState.RESERVED,
            NEVER,
            {"awaiting_approval": True},
            Decision.APPROVAL_REQUIRED,
            ObservationCode.APPROVAL_REQUIRED,
        ),
        (RecordState.EXECUTING, AUTO, {}, Decision.WAIT, ObservationCode.IN_PROGRESS),
        (RecordState.SUCCEEDED, NEVER, {}, Decision.RECORDED_RESULT, None),
        (
            RecordState.FAILED_FINAL,
            NEVER,
            {"error_code": "DECLINED"},
            Decision.RECORDED_RESULT,
            ObservationCode.FAILED,
        ),
        (RecordState.UNKNOWN, NEVER, {}, Decision.FORBIDDEN, ObservationCode.SIDE_EFFECT_UNCERTAIN),
        (
            RecordState.UNKNOWN,
            ASK,
            {},
            Decision.APPROVAL_REQUIRED,
            ObservationCode.APPROVAL_REQUIRED,
        ),
        (RecordState.UNKNOWN, AUTO, {}, Decision.EXECUTE, None),
        (
            RecordState.SUCCEEDED,
            NEVER,
            {"fingerprint_matches": False},
            Decision.CONFLICT,
            ObservationCode.IDEMPOTENCY_KEY_CONFLICT,
        ),
    ],
)
def test_duplicate_answers_follow_the_state_table(state, policy, extra, decision, code) -> None:
    answer = _answer(state, policy, **extra)
    assert (answer.decision, answer.code) == (decision, code)


def test_executing_is_never_started_twice_even_for_idempotent_tools() -> None:
    assert not _answer(RecordState.EXECUTING, AUTO).reexecute


def test_retryable_failure_of_an_auto_tool_is_replayed() -> None:
    answer = _answer(RecordState.FAILED_FINAL, AUTO, error_code="UNAVAILABLE", error_retryable=True)
    assert answer.reexecute and answer.decision is Decision.EXECUTE


def test_permission_denied_is_never_replayed_even_if_marked_retryable() -> None:
    answer = _answer(
        RecordState.FAILED_FINAL, AUTO, error_code="PERMISSION_DENIED", error_retryable=True
    )
    assert not answer.reexecute and answer.next_action == "stop"


@pytest.mark.parametrize(
    ("policy", "uncertain", "error_code", "retryable", "action"),
    [
        (AUTO, True, None, False, RecoveryAction.REPLAY),
        (ASK, True, None, False, RecoveryAction.CHECK_CONDITION),
        (NEVER, True, None, False, RecoveryAction.LOOKUP),
        (NEVER, False, "UNAVAILABLE", True, RecoveryAction.ASK_HUMAN),
        (ASK, False, "UNAVAILABLE", True, RecoveryAction.CHECK_CONDITION),
        (AUTO, False, "UNAVAILABLE", True, RecoveryAction.REPLAY),
        (AUTO, False, "PERMISSION_DENIED", True, RecoveryAction.NEVER),
        (AUTO, False, "DECLINED", False, RecoveryAction.NEVER),
    ],
)
def test_recovery_decision_table(policy, uncertain, error_code, retryable, action) -> None:
    decision = recovery_decision(
        replay_policy=policy, uncertain=uncertain, error_code=error_code, retryable=retryable
    )
    assert decision.action is action


@pytest.mark.parametrize(
    ("error_code", "retryable", "final"),
    [
        ("UNAVAILABLE", True, False),
        ("UNAVAILABLE", False, True),
        (None, True, False),
        ("PERMISSION_DENIED", True, True),
        ("INVALID_INPUT", True, True),
    ],
)
def test_a_failure_is_final_unless_retryable_and_its_code_allows_it(
    error_code, retryable, final
) -> None:
    assert failure_is_final(error_code=error_code, retryable=retryable) is final


def test_a_retryable_failure_of_an_ask_tool_waits_for_a_human() -> None:
    answer = _answer(RecordState.FAILED_FINAL, ASK, error_code="UNAVAILABLE", error_retryable=True)
    assert not answer.reexecute
    assert (answer.decision, answer.next_action) == (Decision.RECORDED_RESULT, "request_replay")


@pytest.mark.parametrize(
    ("policy", "error_code", "retryable", "decision", "code", "next_action"),
    [
        (AUTO, "UNAVAILABLE", True, Decision.EXECUTE, None, "execute"),
        (
            ASK,
            "UNAVAILABLE",
            True,
            Decision.APPROVAL_REQUIRED,
            ObservationCode.APPROVAL_REQUIRED,
            "await_approval",
        ),
        (
            NEVER,
            "UNAVAILABLE",
            True,
            Decision.APPROVAL_REQUIRED,
            ObservationCode.APPROVAL_REQUIRED,
            "await_approval",
        ),
        (
            AUTO,
            "PERMISSION_DENIED",
            True,
            Decision.FORBIDDEN,
            ObservationCode.PERMISSION_DENIED,
            "stop",
        ),
        (NEVER, "DECLINED", False, Decision.FORBIDDEN, ObservationCode.REPLAY_FORBIDDEN, "stop"),
    ],
)
def test_a_replay_of_a_failed_call_gets_its_recovery_decision(
    policy, error_code, retryable, decision, code, next_action
) -> None:
    """A duplicate of a failed call gets the original error; a replay (the runtime asks to
    recover the call) gets what the recovery decision allows."""
    answer = _answer(
        RecordState.FAILED_FINAL,
        policy,
        error_code=error_code,
        error_retryable=retryable,
        replay=True,
    )
    assert (answer.decision, answer.code, answer.next_action) == (decision, code, next_action)
    assert answer.reexecute is (decision is Decision.EXECUTE)


@pytest.mark.parametrize(
    "state", [s for s in RecordState if s is not RecordState.FAILED_FINAL], ids=str
)
@pytest.mark.parametrize("policy", list(ReplayPolicy), ids=str)
@pytest.mark.parametrize("awaiting_approval", [False, True])
def test_a_replay_of_a_call_in_any_other_state_is_answered_as_a_duplicate(
    state: RecordState, policy: ReplayPolicy, awaiting_approval: bool
) -> None:
    duplicate = _answer(state, policy, awaiting_approval=awaiting_approval)
    assert _answer(state, policy, awaiting_approval=awaiting_approval, replay=True) == duplicate


@pytest.mark.parametrize(
    ("policy", "action"),
    [
        (AUTO, RecoveryAction.REPLAY),
        (ASK, RecoveryAction.CHECK_CONDITION),
        (NEVER, RecoveryAction.LOOKUP),
    ],
)
def test_an_answer_from_the_recovery_decision_names_its_action(policy, action) -> None:
    assert _answer(RecordState.UNKNOWN, policy).recovery is action
    assert _answer(RecordState.SUCCEEDED, policy).recovery is None


def test_seed_eval_cases_for_recovery() -> None:
    # read_file timeout -> retry allowed; create_order timeout -> forbidden, uncertain.
    assert recovery_decision(
        replay_policy=AUTO, uncertain=True, error_code=None, retryable=False
    ).retryable
    create_order = recovery_decision(
        replay_policy=NEVER, uncertain=True, error_code=None, retryable=False
    )
    assert create_order.code is ObservationCode.SIDE_EFFECT_UNCERTAIN
    assert not create_order.retryable
    denied = recovery_decision(
        replay_policy=AUTO, uncertain=False, error_code="PERMISSION_DENIED", retryable=True
    )
    assert denied.code is ObservationCode.PERMISSION_DENIED


@pytest.mark.parametrize(
    ("current", "expected"),
    [
        ("after", WriteCheck.ALREADY_APPLIED),
        ("before", WriteCheck.APPLY_AGAIN),
        ("other", WriteCheck.CONFLICT),
    ],
)
def test_write_plan_check(current: str, expected: WriteCheck) -> None:
    assert (
        check_write_plan(current_hash=current, before_hash="before", after_hash="after") is expected
    )


@pytest.mark.parametrize(
    ("check", "action", "escalation", "decision", "code"),
    [
        (
            WriteCheck.ALREADY_APPLIED,
            WriteCheckAction.SETTLE,
            None,
            Decision.RECORDED_RESULT,
            ObservationCode.ALREADY_APPLIED,
        ),
        (
            WriteCheck.APPLY_AGAIN,
            WriteCheckAction.ASK_APPROVAL,
            EscalationKind.WRITE_NOT_LANDED,
            Decision.APPROVAL_REQUIRED,
            ObservationCode.APPROVAL_REQUIRED,
        ),
        (
            WriteCheck.CONFLICT,
            WriteCheckAction.ESCALATE,
            EscalationKind.WRITE_CONFLICT,
            Decision.FORBIDDEN,
            ObservationCode.WRITE_CONFLICT,
        ),
    ],
)
def test_a_write_check_of_an_unknown_outcome_settles_escalates_or_asks(
    check, action, escalation, decision, code
) -> None:
    answered = answer_write_check(check, uncertain=True)
    assert (answered.check, answered.action, answered.escalation) == (check, action, escalation)
    assert (answered.answer.decision, answered.answer.code) == (decision, code)


@pytest.mark.parametrize("check", list(WriteCheck), ids=str)
def test_a_write_check_of_a_failed_write_only_asks_a_human(check: WriteCheck) -> None:
    answered = answer_write_check(check, uncertain=False)
    assert (answered.check, answered.action, answered.escalation) == (
        check,
        WriteCheckAction.ASK_APPROVAL,
        None,
    )
    assert answered.answer.decision is Decision.APPROVAL_REQUIRED
    assert answered.answer.next_action == "await_approval"
