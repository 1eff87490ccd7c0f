"""An approver's decision and what it settles of the action.

A worker's file check that finds a conditional write did not land (the file still has its
content from before) escalates the call and asks an approver whether to apply it again. A
rejection answers it: the write did not land and will not be applied, so the call is settled as
not happened, with the approver's reason, and leaves the operators' queue of unknown calls. The
rejection stands for the action (``calls.approval.rejects``): a retry of it is told so and runs
nothing. Every other decision leaves the action as it is: an approval is used by the start it
was given for, and a rejection of any other request is the model's to hear.
"""

from __future__ import annotations

from contextlib import suppress

from django.contrib.auth.models import AbstractBaseUser
from django.utils.translation import gettext_noop

from ledger.domain import EscalationKind, RecordState, not_executed
from ledger.errors import InvalidTransition
from ledger.models import ApprovalRequest, AuditEvent, IdempotencyRecord
from ledger.records.resolve import resolve_unknown
from ledger.records.transitions import Outcome
from ledger.services import approvals
from ledger.stored_text import StoredText

_NOT_APPLIED = StoredText(
    gettext_noop(
        "The write did not land, and applying it again was rejected by %(who)s: %(reason)s"
    ),
    texts=("reason",),
)


def decide_approval(
    *,
    approval: ApprovalRequest,
    user: AbstractBaseUser,
    approve: bool,
    reason: str,
    source: str = AuditEvent.Source.CONSOLE,
) -> ApprovalRequest:
    """Decide ``approval`` (``approvals.decide``: who may, a reason to reject, single use),
    then settle what a rejection settles (above). The decision stands on its own: the
    settlement follows it, and a call settled meanwhile by other means stays as it was."""
    decided = approvals.decide(
        approval=approval, user=user, approve=approve, reason=reason, source=source
    )
    record = decided.record
    record.refresh_from_db()
    if decided.state == ApprovalRequest.State.REJECTED and not_landed(record):
        message = _NOT_APPLIED(who=user.get_username(), reason=decided.decision_reason)
        with suppress(InvalidTransition):  # settled meanwhile (a late report, an operator)
            resolve_unknown(
                record=record,
                outcome=Outcome.FAILED,
                actor=user.get_username(),
                source=source,
                error=not_executed(message),
                detail=message,
            )
    return decided


def not_landed(record: IdempotencyRecord) -> bool:
    """Whether ``record`` is a call whose file check found its write did not land, escalated
    for that and still unknown."""
    return (
        record.state == RecordState.UNKNOWN
        and record.escalated
        and record.escalation_kind == EscalationKind.WRITE_NOT_LANDED
    )
