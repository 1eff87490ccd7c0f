"""The vocabulary of the ledger: plain enums shared by the pure logic, the models and the API.

No Django imports here, so the classifiers and the decision table stay plain Python.
"""

from __future__ import annotations

from enum import StrEnum

from django.utils.translation import gettext_noop

from ledger.stored_text import StoredText


class Idempotency(StrEnum):
    IDEMPOTENT = "idempotent"
    CONDITIONAL = "conditional"
    NON_IDEMPOTENT = "non_idempotent"

    @property
    def rank(self) -> int:
        """Higher is more conservative; combining classifications takes the maximum."""
        return _IDEMPOTENCY_RANK[self]


_IDEMPOTENCY_RANK = {
    Idempotency.IDEMPOTENT: 0,
    Idempotency.CONDITIONAL: 1,
    Idempotency.NON_IDEMPOTENT: 2,
}


class ReplayPolicy(StrEnum):
    AUTO = "auto"
    ASK = "ask"
    NEVER = "never"


#: The policy that goes with each idempotency class (DESIGN section 2).
POLICY_FOR = {
    Idempotency.IDEMPOTENT: ReplayPolicy.AUTO,
    Idempotency.CONDITIONAL: ReplayPolicy.ASK,
    Idempotency.NON_IDEMPOTENT: ReplayPolicy.NEVER,
}


class KeyScope(StrEnum):
    RUN = "run"  # retry-safe inside one run; a new run is a new action
    BUSINESS = "business"  # user + business object; survives a refresh or a new run


class ServerTrust(StrEnum):
    TRUSTED = "trusted"
    UNTRUSTED = "untrusted"


class RecordState(StrEnum):
    RESERVED = "reserved"
    EXECUTING = "executing"
    SUCCEEDED = "succeeded"
    FAILED_FINAL = "failed_final"
    UNKNOWN = "unknown"


TERMINAL_RECORD_STATES = frozenset({RecordState.SUCCEEDED, RecordState.FAILED_FINAL})


class EntryStatus(StrEnum):
    PLANNED = "planned"
    APPROVED = "approved"
    STARTED = "started"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    UNCERTAIN = "uncertain"


class Decision(StrEnum):
    """What the ledger told the caller to do with one call."""

    EXECUTE = "execute"
    RECORDED_RESULT = "recorded_result"
    WAIT = "wait"
    APPROVAL_REQUIRED = "approval_required"
    FORBIDDEN = "forbidden"
    CONFLICT = "conflict"
    #: A shadow run's side-effecting call: nothing runs, the intended action is recorded.
    SHADOW_DRY_RUN = "shadow_dry_run"


class ObservationCode(StrEnum):
    SIDE_EFFECT_UNCERTAIN = "SIDE_EFFECT_UNCERTAIN"
    IN_PROGRESS = "IN_PROGRESS"
    REPLAY_FORBIDDEN = "REPLAY_FORBIDDEN"
    APPROVAL_REQUIRED = "APPROVAL_REQUIRED"
    APPROVAL_REJECTED = "APPROVAL_REJECTED"
    IDEMPOTENCY_KEY_CONFLICT = "IDEMPOTENCY_KEY_CONFLICT"
    WRITE_CONFLICT = "WRITE_CONFLICT"
    ALREADY_APPLIED = "ALREADY_APPLIED"
    PERMISSION_DENIED = "PERMISSION_DENIED"
    RUN_HALTED = "RUN_HALTED"
    FAILED = "FAILED"
    SHADOW_DRY_RUN = "SHADOW_DRY_RUN"


#: The error code of an action settled as not happened (an operator's word, a look-up that
#: found nothing, a rejected re-application of a write that did not land).
NOT_EXECUTED = "NOT_EXECUTED"


def not_executed(message: str) -> dict[str, str]:
    """The error an action settled as not happened records: a retry with its key may run it."""
    return {"code": NOT_EXECUTED, "message": message}


class EscalationKind(StrEnum):
    """Why an unknown call was handed to a human (``ledger.records.escalation.escalate``)."""

    #: The file of a conditional write changed under it (the runtime's replay or a worker's
    #: file check); the console counts these as write conflicts.
    WRITE_CONFLICT = "write_conflict"
    #: A file check (a worker's, or the runtime's replay with the file's hash) found the write
    #: did not land: a human approves applying it again.
    WRITE_NOT_LANDED = "write_not_landed"
    #: Nothing can look the call up (no adapter, no registered workspace, a refused path).
    NO_CHECK = "no_check"
    #: The look-ups kept failing until the adapter's attempts ran out.
    LOOKUPS_EXHAUSTED = "lookups_exhausted"
    #: An operator handed the call to a human, with a reason.
    OPERATOR = "operator"
    #: Its holder reported it ran, or may have, after it was settled as failed without effect
    #: (``ledger.records.transitions.CONTRADICTED``).
    CONTRADICTED_SETTLEMENT = "contradicted_settlement"


#: What a human is told about a write conflict (``EscalationKind.WRITE_CONFLICT``).
WRITE_CONFLICT_ESCALATION = StoredText(
    gettext_noop(
        "Write conflict: the file was changed by someone else since the write was planned. "
        "A human decides."
    )
)()

#: What a human is told about a write that did not land (``EscalationKind.WRITE_NOT_LANDED``).
WRITE_NOT_LANDED_ESCALATION = StoredText(
    gettext_noop(
        "The write did not land (the file still has its old content): approve applying it "
        "again, or reject."
    )
)()

#: Error codes that are final by nature: never replayed, whatever the tool's class.
FINAL_ERROR_CODES = frozenset({"PERMISSION_DENIED", "INVALID_INPUT", "NOT_FOUND", "FORBIDDEN"})


class InputSource(StrEnum):
    USER = "user"
    MODEL = "model"
    TOOL_OUTPUT = "tool_output"
    EXTERNAL = "external"


class DataClassification(StrEnum):
    PUBLIC = "public"
    INTERNAL = "internal"
    CONFIDENTIAL = "confidential"
    RESTRICTED = "restricted"


def choices(enum: type[StrEnum]) -> list[tuple[str, str]]:
    """Django ``choices`` for one of the enums above."""
    return [(member.value, member.value.replace("_", " ")) for member in enum]


class PerCall(StrEnum):
    """What a tool's deciding argument holds."""

    SQL = "sql"
    SHELL = "shell"
    CODE = "code"
    FILE_WRITE = "file_write"
