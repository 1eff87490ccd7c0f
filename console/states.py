"""One state, one word: what the console says of an action's record and of an approval, derived
from their current state in this one place, for every badge, banner and button that shows it.

An approval stored ``pending`` that can no longer be given (expired, its action settled or
changed, its run halted: ``approvals.void_reason``) reads as what it has become, never
"pending"; an action's escalation is shown only while its outcome is unknown.
"""

from __future__ import annotations

from dataclasses import dataclass

from ledger.domain import RecordState
from ledger.models import ApprovalRequest, IdempotencyRecord
from ledger.services import approvals

Approval = ApprovalRequest.State


@dataclass(frozen=True)
class Status:
    """A state as the console shows it: the identifier its word is (``|term``), the badge's
    tone (``ok``, ``warn``, ``danger`` or none) and, where it says more, why."""

    state: str
    tone: str = ""
    why: str = ""


_APPROVAL_TONES = {
    Approval.PENDING: "warn",
    Approval.APPROVED: "ok",
    Approval.CONSUMED: "ok",
    Approval.REJECTED: "danger",
    Approval.INVALIDATED: "danger",
    Approval.EXPIRED: "danger",
}


def approval_status(approval: ApprovalRequest) -> Status:
    """The approval as it stands now: a pending one that can no longer be given is expired
    (its time is up) or invalidated (anything else ``void_reason`` names), with that reason.
    (Needs what ``void_reason`` reads: its entry's tool and run with the run's combination,
    and its record.)"""
    state = Approval(approval.state)
    if state is Approval.PENDING and (why := approvals.void_reason(approval)) is not None:
        state = Approval.EXPIRED if why == approvals.EXPIRED else Approval.INVALIDATED
        return Status(state.value, _APPROVAL_TONES[state], why)
    return Status(state.value, _APPROVAL_TONES[state], approval.decision_reason or "")


def decidable(approval: ApprovalRequest) -> bool:
    """Whether an approver may still decide it: pending, and still able to be given."""
    return approval_status(approval).state == Approval.PENDING


_RECORD_TONES = {
    RecordState.UNKNOWN: "warn",
    RecordState.SUCCEEDED: "ok",
    RecordState.FAILED_FINAL: "danger",
}


def record_status(record: IdempotencyRecord) -> Status:
    """The action's state; while its outcome is unknown and a human has it, why."""
    state = RecordState(record.state)
    why = record.escalation_reason if escalated_now(record) else ""
    return Status(state.value, _RECORD_TONES.get(state, ""), why)


def escalated_now(record: IdempotencyRecord) -> bool:
    """Whether a human has the action now: escalated while its outcome is unknown (a settled
    action may have been escalated once, and is not any more)."""
    return record.state == RecordState.UNKNOWN and record.escalated
