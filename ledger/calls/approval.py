"""A call that needs a human's approval: the request opened (or joined) for it, unless a human
already rejected this exact action."""

from __future__ import annotations

from ledger.approval_policies import PolicySpec
from ledger.calls.selectors import latest_approval
from ledger.calls.values import Caller, CallResult
from ledger.domain import Decision, ObservationCode
from ledger.models import ApprovalRequest, IdempotencyRecord, LedgerEntry
from ledger.services import approvals


def rejects(latest: ApprovalRequest | None, entry: LedgerEntry, record: IdempotencyRecord) -> bool:
    """Whether ``latest``, the record's latest approval request, is a human's rejection of this
    exact action: the rejection stands, and the same action is not put to a human again."""
    return (
        latest is not None
        and latest.state == ApprovalRequest.State.REJECTED
        and latest.action_hash == approvals.action_hash(entry, record)
    )


def rejection_of(record: IdempotencyRecord, entry: LedgerEntry) -> ApprovalRequest | None:
    """The record's latest approval request, if it rejected this exact action (``rejects``)."""
    latest = latest_approval(record)
    return latest if rejects(latest, entry, record) else None


def ask_for_approval(
    result: CallResult,
    record: IdempotencyRecord,
    caller: Caller,
    policy: PolicySpec | None = None,
) -> None:
    """Open (or join) the approval request, unless this exact action was already rejected;
    ``policy``: the approval policy that asks before the action first runs."""
    latest = rejection_of(record, result.entry)
    if latest is not None:
        result.decision = Decision.FORBIDDEN
        result.approval = latest
        rejected(result.entry)
        return
    result.approval = approvals.request_approval(
        record=record,
        entry=result.entry,
        requested_by=caller.identity,
        requester_id=caller.user_id,
        policy=policy,
    )


def rejected(entry: LedgerEntry) -> None:
    """The entry's decision becomes ``forbidden``: its action was rejected by a human."""
    entry.decision, entry.observation_code = Decision.FORBIDDEN, ObservationCode.APPROVAL_REJECTED
    LedgerEntry.objects.filter(pk=entry.pk).update(
        decision=entry.decision, observation_code=entry.observation_code
    )
