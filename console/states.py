"""One state, one word: what the console says of an action's record and of an approval, derived
from their current state in this one place, for every badge, banner and button that shows it.

An approval stored ``pending`` that can no longer be given (expired, its action settled or
changed, its run halted: ``approvals.void_reason``) reads as what it has become, never
"pending"; an action's escalation is shown only while its outcome is unknown.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from django.utils.translation import gettext as _

from ledger.domain import EscalationKind, RecordState
from ledger.models import ApprovalRequest, IdempotencyRecord
from ledger.services import approvals
from reconcile import approved_writes

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


@dataclass(frozen=True)
class NextStep:
    """What happens next to an unknown call, and who does it (``who``: ``worker``,
    ``approver``, ``runtime`` or ``operator``), as its queue row says it."""

    who: str
    what: str
    approval_id: int | None = None


def next_step(record: IdempotencyRecord, *, looking_up: bool, now: datetime) -> NextStep:
    """The next step of an unknown call of the queue (``selectors.unknown_calls``, which
    reads its latest approval request as ``approval_*``): looked up by a worker until a human
    has it; for a write that did not land, the approver's decision and then what follows it;
    for anything else a human has, the operator's, for the reason it was escalated."""
    if not escalated_now(record):
        if looking_up:
            return NextStep("worker", _("A worker looks it up downstream."))
        return NextStep("worker", _("Waiting for a worker: none is running."))
    approval = getattr(record, "approval_id", None)
    state = getattr(record, "approval_state", None)
    if record.escalation_kind == EscalationKind.WRITE_NOT_LANDED and approval is not None:
        expires_at = getattr(record, "approval_expires_at", None)
        if state == Approval.PENDING and expires_at is not None and expires_at > now:
            return NextStep(
                "approver", _("An approver decides whether to apply it again."), approval
            )
        if state == Approval.APPROVED:
            what = _(
                "Approved by %(who)s: the runtime's next retry of this call applies it; once "
                "its run is over, or %(minutes)d minutes on, the ledger's worker applies it if "
                "the file is still as planned."
            ) % {
                "who": getattr(record, "approval_decided_by", None) or "?",
                "minutes": int(approved_writes.RUNTIME_GRACE.total_seconds() // 60),
            }
            return NextStep("runtime", what, approval)
        if state in (Approval.PENDING, Approval.EXPIRED):
            what = _("Its approval expired undecided: look it up again to ask anew, or settle it.")
            return NextStep("operator", what, approval)
        if state == Approval.REJECTED:
            return NextStep(
                "operator", _("Applying it again was rejected: mark it did not happen."), approval
            )
        return NextStep(
            "operator", _("Its approval was voided: look it up again, or settle it."), approval
        )
    # An operator settles it, for the reason it was escalated (a stored text: shown |stored).
    reason = record.escalation_reason or _("An operator settles it: look it up or mark it.")
    return NextStep("operator", reason)


def call_label(record: IdempotencyRecord) -> str:
    """How a message names an action: its tool, and the file it writes or its key."""
    plan = record.write_plan
    return f"{record.tool.name} ({plan.path if plan is not None else record.key})"
