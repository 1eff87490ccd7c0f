"""The decision tables of DESIGN sections 3-5, as pure functions.

``answer_existing_record`` says what a request gets when its key is already taken (the state
table of section 3), a duplicate or a replay; ``recovery_decision`` says how an uncertain or
failed call may be recovered (section 4), and ``failure_is_final`` which failures never are;
``check_write_plan`` is the file-hash condition check of section 5 and ``answer_write_check``
what its outcome means for the record. The services apply these decisions to the database;
nothing here touches it.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from enum import StrEnum

from ledger.domain import (
    FINAL_ERROR_CODES,
    Decision,
    EscalationKind,
    ObservationCode,
    RecordState,
    ReplayPolicy,
)


@dataclass(frozen=True, slots=True)
class ExistingRecordAnswer:
    """What a request whose key already has a record gets."""

    decision: Decision
    code: ObservationCode | None
    next_action: str
    #: True when the request may take the record and execute (an automatic replay).
    reexecute: bool = False
    #: The recovery decision's action, for a record that failed or whose outcome is unknown.
    recovery: RecoveryAction | None = None


_AWAITING_APPROVAL = ExistingRecordAnswer(
    Decision.APPROVAL_REQUIRED, ObservationCode.APPROVAL_REQUIRED, "await_approval"
)


def answer_existing_record(
    *,
    state: RecordState,
    fingerprint_matches: bool,
    replay_policy: ReplayPolicy,
    awaiting_approval: bool,
    error_code: str | None,
    error_retryable: bool,
    replay: bool = False,
) -> ExistingRecordAnswer:
    """The answer for a request whose idempotency key is already recorded: a duplicate, or with
    ``replay`` the runtime's request to recover the call. The two differ only for a failed
    record: a duplicate gets the original error, a replay what the recovery decision allows."""
    if not fingerprint_matches:
        return ExistingRecordAnswer(
            Decision.CONFLICT, ObservationCode.IDEMPOTENCY_KEY_CONFLICT, "fix_request"
        )
    if state is RecordState.RESERVED:
        if awaiting_approval:
            return _AWAITING_APPROVAL
        return ExistingRecordAnswer(Decision.WAIT, ObservationCode.IN_PROGRESS, "wait")
    if state is RecordState.EXECUTING:
        return ExistingRecordAnswer(Decision.WAIT, ObservationCode.IN_PROGRESS, "wait")
    if state is RecordState.SUCCEEDED:
        return ExistingRecordAnswer(Decision.RECORDED_RESULT, None, "use_result")
    if state is RecordState.FAILED_FINAL:
        recovery = recovery_decision(
            replay_policy=replay_policy,
            uncertain=False,
            error_code=error_code,
            retryable=error_retryable,
        )
        if replay or recovery.action is RecoveryAction.REPLAY:
            return _recovery_answer(recovery)
        # The original error is returned; its own code goes into the observation.
        return ExistingRecordAnswer(
            Decision.RECORDED_RESULT,
            ObservationCode.FAILED,
            next_action_after_failure(final=recovery.action is RecoveryAction.NEVER),
            recovery=recovery.action,
        )
    # UNKNOWN: the first attempt may have had its effect.
    return _recovery_answer(
        recovery_decision(
            replay_policy=replay_policy, uncertain=True, error_code=None, retryable=False
        )
    )


def next_action_after_failure(*, final: bool) -> str:
    """What a runtime told of a failed call does next: ask for a replay, unless the failure is
    final (``failure_is_final``)."""
    return "stop" if final else "request_replay"


def _recovery_answer(recovery: RecoveryDecision) -> ExistingRecordAnswer:
    """What a request to recover a call gets from its recovery decision (DESIGN section 4).
    A condition to check is answered as the human's approval it leads to; the caller that
    has the file's hash checks it (``ledger.calls.recover``)."""
    action = recovery.action
    if action is RecoveryAction.REPLAY:
        return ExistingRecordAnswer(
            Decision.EXECUTE, None, "execute", reexecute=True, recovery=action
        )
    if action in (RecoveryAction.CHECK_CONDITION, RecoveryAction.ASK_HUMAN):
        return replace(_AWAITING_APPROVAL, recovery=action)
    if action is RecoveryAction.LOOKUP:
        return ExistingRecordAnswer(
            Decision.FORBIDDEN, ObservationCode.SIDE_EFFECT_UNCERTAIN, "lookup", recovery=action
        )
    return ExistingRecordAnswer(Decision.FORBIDDEN, recovery.code, "stop", recovery=action)


class RecoveryAction(StrEnum):
    REPLAY = "replay"  # execute again, automatically
    CHECK_CONDITION = "check_condition"  # run the condition check, then a human approves
    LOOKUP = "lookup"  # look the action up downstream by key, or a human resolves
    ASK_HUMAN = "ask_human"  # nothing happened, but only a human may start it again
    NEVER = "never"  # the failure is final


@dataclass(frozen=True, slots=True)
class RecoveryDecision:
    action: RecoveryAction
    code: ObservationCode | None
    retryable: bool
    reason: str


def failure_is_final(*, error_code: str | None, retryable: bool) -> bool:
    """Whether a failed call is failed for good: never replayed, never started again (DESIGN
    section 4). Its reporter says whether it may be retried; a code that is always final
    (``PERMISSION_DENIED`` and the like) is final whatever the reporter said."""
    return not retryable or error_code in FINAL_ERROR_CODES


def recovery_decision(
    *,
    replay_policy: ReplayPolicy,
    uncertain: bool,
    error_code: str | None,
    retryable: bool,
) -> RecoveryDecision:
    """How a call that ended ``uncertain`` (or ``failed``, with its reporter's ``retryable``)
    may be recovered (DESIGN section 4)."""
    if not uncertain and failure_is_final(error_code=error_code, retryable=retryable):
        code = (
            ObservationCode.PERMISSION_DENIED
            if error_code == ObservationCode.PERMISSION_DENIED
            else ObservationCode.REPLAY_FORBIDDEN
        )
        return RecoveryDecision(
            RecoveryAction.NEVER, code, False, f"The failure ({error_code}) is final."
        )
    if replay_policy is ReplayPolicy.AUTO:
        return RecoveryDecision(
            RecoveryAction.REPLAY, None, True, "Idempotent tool: replaying is harmless."
        )
    if replay_policy is ReplayPolicy.ASK:
        return RecoveryDecision(
            RecoveryAction.CHECK_CONDITION,
            ObservationCode.APPROVAL_REQUIRED,
            False,
            "Conditional tool: check the condition, then a human approves the replay.",
        )
    if uncertain:
        return RecoveryDecision(
            RecoveryAction.LOOKUP,
            ObservationCode.SIDE_EFFECT_UNCERTAIN,
            False,
            "Non-idempotent tool whose outcome is unknown: look it up downstream, never retry.",
        )
    return RecoveryDecision(
        RecoveryAction.ASK_HUMAN,
        ObservationCode.APPROVAL_REQUIRED,
        False,
        "Non-idempotent tool that failed without effect: only a human may start it again.",
    )


class WriteCheck(StrEnum):
    ALREADY_APPLIED = "already_applied"
    APPLY_AGAIN = "apply_again"
    CONFLICT = "conflict"


def check_write_plan(*, current_hash: str, before_hash: str, after_hash: str) -> WriteCheck:
    """Seed 000's ``canReplayFileWrite``: compare the file's hash now with the plan's."""
    if current_hash == after_hash:
        return WriteCheck.ALREADY_APPLIED
    if current_hash == before_hash:
        return WriteCheck.APPLY_AGAIN
    return WriteCheck.CONFLICT


class WriteCheckAction(StrEnum):
    SETTLE = "settle"  # the write landed: the record succeeds, nothing runs again
    ESCALATE = "escalate"  # the file changed under the write: a human decides the outcome
    ASK_APPROVAL = "ask_approval"  # only a human may write it (again)


@dataclass(frozen=True, slots=True)
class WriteCheckAnswer:
    """What a write plan check means for its record, and what the caller is told."""

    check: WriteCheck
    action: WriteCheckAction
    #: The unknown record is handed to a human for this reason (with an approval asked, too).
    escalation: EscalationKind | None
    answer: ExistingRecordAnswer


def answer_write_check(check: WriteCheck, *, uncertain: bool) -> WriteCheckAnswer:
    """What a write plan check means for a record whose outcome is unknown (``uncertain``) or
    which failed without effect (DESIGN section 5).

    An unknown write that landed is settled, with no replay; one that did not land waits for a
    human's approval to apply it again, and is escalated as not landed, so the outcome is
    known to the people who look at unknown calls and no look-up checks it again meanwhile;
    one whose file someone else changed is escalated: a human decides. A failed write had no
    effect: there is no outcome to settle or escalate, and whatever the file shows, only a
    human may write it again, told what the check found."""
    approval = _AWAITING_APPROVAL
    if not uncertain:
        return WriteCheckAnswer(check, WriteCheckAction.ASK_APPROVAL, None, approval)
    if check is WriteCheck.ALREADY_APPLIED:
        applied = ExistingRecordAnswer(
            Decision.RECORDED_RESULT, ObservationCode.ALREADY_APPLIED, "use_result"
        )
        return WriteCheckAnswer(check, WriteCheckAction.SETTLE, None, applied)
    if check is WriteCheck.APPLY_AGAIN:
        return WriteCheckAnswer(
            check, WriteCheckAction.ASK_APPROVAL, EscalationKind.WRITE_NOT_LANDED, approval
        )
    conflict = ExistingRecordAnswer(Decision.FORBIDDEN, ObservationCode.WRITE_CONFLICT, "ask_human")
    return WriteCheckAnswer(
        check, WriteCheckAction.ESCALATE, EscalationKind.WRITE_CONFLICT, conflict
    )
