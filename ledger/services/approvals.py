"""Approvals: a human decision bound to one action hash, usable once (DESIGN section 5)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.db import IntegrityError, transaction
from django.db.models import BigIntegerField, F, Func, QuerySet, Value
from django.db.models.functions import Now
from django.utils.translation import gettext_noop

from ledger.approval_policies import PolicySpec
from ledger.clock import db_now
from ledger.errors import ApprovalError, InvalidInput
from ledger.keys import fingerprint
from ledger.models import (
    ApprovalRequest,
    AuditEvent,
    Compensation,
    IdempotencyRecord,
    LedgerEntry,
    Membership,
    Run,
    ServiceAccount,
)
from ledger.permissions import Role
from ledger.redaction import redact_text
from ledger.services.audit import audit
from ledger.sql.statements import DbTime, insert_all
from ledger.stored_text import StoredText

Approval = ApprovalRequest.State


def action_hash(entry: LedgerEntry, record: IdempotencyRecord) -> str:
    """What exactly is being approved: tool, input, write plan hashes and version combination
    of ``entry``, a call of ``record``'s action.

    If any of them changes, the hash changes and an approval given for the old one is void.
    """
    plan = record.write_plan
    return fingerprint(
        {
            "tool": entry.tool.name,
            "input": entry.input_hash,
            "write_plan": [plan.path, plan.before_hash, plan.after_hash] if plan else None,
            "combination": entry.combination.fingerprint if entry.combination else None,
        }
    )


def open_approval(record: IdempotencyRecord) -> ApprovalRequest | None:
    return (
        ApprovalRequest.objects.filter(record=record, state__in=ApprovalRequest.OPEN_STATES)
        .order_by("-pk")
        .first()
    )


def request_approval(
    *,
    record: IdempotencyRecord,
    entry: LedgerEntry,
    requested_by: str,
    requester_id: int | None = None,
    detail: str = "",
    condition: str = "",
    policy: PolicySpec | None = None,
) -> ApprovalRequest:
    """The open approval request for this record, created if there is none. ``requester_id``
    is the user behind the request (who may not decide it): asking again joins the open request
    as one more of its principals. ``condition`` is the outcome of a conditional write's file
    check (``apply_again``), kept for the approver; ``policy`` the approval policy that asks
    before the action first runs, whose reason the approver and the model read."""
    if policy is not None:
        detail = asked_by(policy)
    existing = open_approval(record)
    if existing is not None:
        join(existing, requester_id, requested_by)
        return existing
    try:
        with transaction.atomic():
            # Stamped by the database's clock, its creation too: the service levels of on-call
            # count its wait from ``created_at`` (DESIGN section 3, one clock).
            expires: Any = DbTime(settings.LEDGER_APPROVAL_EXPIRY_SECONDS)
            approval = ApprovalRequest(
                tenant_id=record.tenant_id,
                record=record,
                entry=entry,
                action_hash=action_hash(entry, record),
                requested_by=requested_by,
                requested_by_user_id=requester_id,
                principal_ids=[requester_id] if requester_id is not None else [],
                policy_id=policy.id if policy is not None else None,
                expires_at=expires,
            )
            insert_all(approval)
            audit(
                tenant=record.tenant_id,
                actor=requested_by,
                action="approval.requested",
                target=approval,
                source=AuditEvent.Source.API,
                detail=detail,
                after={
                    "record": record.pk,
                    "action_hash": approval.action_hash,
                    "condition": condition,
                },
            )
    except IntegrityError:  # a concurrent request created it first
        winner = open_approval(record)
        if winner is None:
            raise
        join(winner, requester_id, requested_by)
        return winner
    return approval


_ASKED_BY = StoredText(
    gettext_noop("The approval policy “%(name)s” asks a human first (%(asks_for)s): %(reason)s")
)


def asked_by(policy: PolicySpec) -> str:
    """Why a policy's request waits for a human, as the approver and the model read it."""
    return _ASKED_BY(name=policy.name, asks_for=policy.describe(), reason=policy.reason)


def join(
    approval: ApprovalRequest,
    requester_id: int | None,
    requested_by: str,
    *,
    source: str = AuditEvent.Source.API,
) -> None:
    """Add the user asking for an open request's action to its principals (once), audited:
    whoever asks for an action may not decide it, however many ask."""
    if requester_id is None or requester_id in approval.principal_ids:
        return
    with transaction.atomic():
        added = (
            ApprovalRequest.objects.filter(pk=approval.pk)
            .exclude(principal_ids__contains=[requester_id])
            .update(
                principal_ids=Func(
                    F("principal_ids"),
                    Value(requester_id, output_field=BigIntegerField()),
                    function="array_append",
                )
            )
        )
        if added:
            approval.principal_ids = [*approval.principal_ids, requester_id]
            audit(
                tenant=approval.tenant_id,
                actor=requested_by,
                action="approval.asked_again",
                target=approval,
                source=source,
                after={"principal": requester_id},
            )


def principals_of(approval: ApprovalRequest) -> set[int]:
    """The users who asked for the approval's action, none of whom may decide it: its
    requester and whoever asked again (``principal_ids``); the owner of every token that
    called the action's key (its first call, duplicates, replays; a service account's calls
    name the service account); and the people those calls were made for, where the run's user
    or the call's end user is the user name of one of the tenant's members."""
    principals = set(approval.principal_ids)
    if approval.requested_by_user_id is not None:
        principals.add(approval.requested_by_user_id)
    calls = LedgerEntry.objects.filter(record_id=approval.record_id)
    principals |= set(
        calls.exclude(caller_token=None).values_list("caller_token__user_id", flat=True)
    )
    acted_for = set(calls.values_list("run__user_id", flat=True))
    acted_for |= set(calls.exclude(end_user_id="").values_list("end_user_id", flat=True))
    principals |= set(
        Membership.objects.filter(
            tenant_id=approval.tenant_id, user__username__in=acted_for
        ).values_list("user_id", flat=True)
    )
    return principals


def void_reason(approval: ApprovalRequest, *, now: datetime | None = None) -> str | None:
    """Why a pending approval can no longer be given, or None while it still can. The console
    shows the same reason ``decide`` refuses with; ``still_open`` is the same rule as a query.
    (Needs ``entry`` with its tool, its run with the run's combination, and ``record``.)"""
    entry = approval.entry
    if not approval.record.waits_to_start:
        return f"the action is already settled ({approval.record.state})"
    if expired(approval, now=now):
        return EXPIRED
    if (run := entry.run).halted:
        if run.combination is None or run.status == Run.Status.HALTED:
            return f"its run is {run.status} ({run.termination_reason or 'no reason'})"
        return f"its version combination {run.combination.label} was halted"
    if action_hash(entry, approval.record) != approval.action_hash:
        return "the action changed since the request was made"
    return None


EXPIRED = "the request expired"


def expired(approval: ApprovalRequest, *, now: datetime | None = None) -> bool:
    """Whether the approval's time is up (by the database's clock unless ``now`` is given):
    it can no longer be given, nor used once given. ``still_open`` asks it as a query."""
    return approval.expires_at <= (now or db_now())


def still_open(approvals: QuerySet[ApprovalRequest] | None = None) -> QuerySet[ApprovalRequest]:
    """The pending approvals of ``approvals`` (all by default) that can still be given: the
    query form of ``void_reason``, by the database's clock. Not expired, the action waiting to
    start (``IdempotencyRecord.waits_to_start``), its run and its combination not halted. No job
    marks an approval expired, so every list of what waits for an approver reads it through
    here. Whether the action changed since the request is a hash computed in Python: ``decide``
    checks that one when the approver acts."""
    approvals = ApprovalRequest.objects.all() if approvals is None else approvals
    return approvals.filter(
        IdempotencyRecord.waits_to_start_q("record__"),
        state=Approval.PENDING,
        expires_at__gt=Now(),
    ).exclude(Run.halted_q("entry__run__"))


def voided_by_halt(combination_id: int) -> QuerySet[ApprovalRequest]:
    """The approvals a halt of the combination voids: every open one of an action planned
    under it (an approval given then would let a halted combination's action run)."""
    return ApprovalRequest.objects.filter(
        entry__combination_id=combination_id, state__in=ApprovalRequest.OPEN_STATES
    ).order_by("pk")


def void_open_approvals(*, combination_id: int, actor: str, source: str, detail: str) -> list[int]:
    """Void the approvals a halt of the combination voids (``voided_by_halt``), each audited;
    returns the ids of those this call voided."""
    return [
        approval.pk
        for approval in voided_by_halt(combination_id)
        if invalidate(approval=approval, actor=actor, detail=detail, source=source)
    ]


class DeciderRefused(ApprovalError):
    """This user may not decide this request: a principal of its action, a service account,
    or not a person with the approver role in its tenant."""

    code = "FORBIDDEN"
    http_status = 403


#: The roles whose members decide approvals.
DECIDING_ROLES = (Role.APPROVER, Role.ADMIN)


def refusal_of_decider(approval: ApprovalRequest, user: AbstractBaseUser) -> str | None:
    """Why this user may not decide this request, or None: the one rule for the console, the
    approvals API and compensations. The decider is a person (never a service account) holding
    the approver role in the request's tenant, and none of its action's principals
    (``principals_of``)."""
    if ServiceAccount.objects.filter(user_id=user.pk).exists():
        return "a service account cannot decide an approval: a human must"
    if not user.is_active or not may_decide_in(user, approval.tenant_id):
        return "only a person with the approver role in this tenant decides approvals"
    if user.pk in principals_of(approval):
        return "the requester cannot approve their own request (they asked for this action)"
    if approval.requested_by == user.get_username():
        return "the requester cannot approve their own request"
    return None


def may_decide_in(user: AbstractBaseUser, tenant_id: int) -> bool:
    """Whether ``user`` holds a deciding role in the tenant (a superuser member is its admin)."""
    membership = Membership.objects.filter(user_id=user.pk, tenant_id=tenant_id).first()
    if membership is None:
        return False
    return membership.role in DECIDING_ROLES or bool(getattr(user, "is_superuser", False))


def reason_needed(approval: ApprovalRequest, *, approve: bool) -> str | None:
    """What a decision without a reason lacks, or None when it needs none: a rejection's
    reason goes to the model; a compensation's is the audit trail's why, either way."""
    if Compensation.objects.filter(tenant_id=approval.tenant_id, key=approval.record.key).exists():
        return "deciding a compensation needs a reason"
    if not approve:
        return "a rejection needs a reason for the model"
    return None


def decide(
    *,
    approval: ApprovalRequest,
    user: AbstractBaseUser,
    approve: bool,
    reason: str,
    source: str = AuditEvent.Source.CONSOLE,
) -> ApprovalRequest:
    """Approve or reject a pending request. The requester may not decide their own request,
    a rejection needs a reason (stored redacted: the model is told it), and a request whose
    action changed is invalidated instead.
    """
    actor = user.get_username()
    denial: str | None = None
    self_approval = False
    with transaction.atomic():
        locked = (
            ApprovalRequest.objects.select_for_update(of=("self",))
            .select_related(
                "entry__tool", "entry__combination", "entry__run__combination", "record"
            )
            .get(pk=approval.pk)
        )
        # The clock after the lock: a decision that waited for the row judges its expiry
        # at the moment it may act, not when it began to wait.
        now = db_now()
        before: dict[str, Any] = {"state": locked.state}
        if locked.state != Approval.PENDING:
            denial = f"the request is already {locked.state}"
        elif (refusal := refusal_of_decider(locked, user)) is not None:
            denial = refusal
            self_approval = True
        elif not reason.strip() and (missing := reason_needed(locked, approve=approve)):
            raise InvalidInput(missing)
        elif (why := void_reason(locked, now=now)) is not None:
            locked.state = Approval.EXPIRED if why == EXPIRED else Approval.INVALIDATED
            denial = why
        else:
            locked.state = Approval.APPROVED if approve else Approval.REJECTED
            locked.decided_by = user  # type: ignore[assignment]
            locked.decision_reason = redact_text(reason.strip())
            locked.decided_at = now
        if locked.state != before["state"]:
            locked.save()
        if denial is None or locked.state != before["state"]:
            audit(
                tenant=locked.tenant_id,
                actor=actor,
                action=f"approval.{locked.state}",
                target=locked,
                source=source,
                before=before,
                after={"state": locked.state},
                detail=reason,
            )
    if denial is not None:
        audit(
            tenant=locked.tenant_id,
            actor=actor,
            action="approval.decide_refused",
            target=locked,
            source=source,
            outcome=AuditEvent.Result.DENIED,
            detail=denial,
        )
        raise (DeciderRefused if self_approval else ApprovalError)(denial)
    return locked


class ApprovalVoid(ApprovalError):
    """The granted approval cannot be used (another action, or expired); nothing written yet."""

    def __init__(self, approval: ApprovalRequest, reason: str) -> None:
        super().__init__(reason)
        self.approval = approval


def consume(
    *,
    record: IdempotencyRecord,
    entry: LedgerEntry,
    actor: str,
    source: str = AuditEvent.Source.API,
) -> ApprovalRequest:
    """Use the approval of this record once; it must match the action being started.

    Runs inside the caller's transaction, so the approval is used up only if the action
    really starts. On a mismatch nothing is written: the caller invalidates it afterwards.
    """
    approval = (
        ApprovalRequest.objects.select_for_update()
        .filter(record=record, state=Approval.APPROVED)
        .first()
    )
    if approval is None:
        raise ApprovalError("there is no granted approval for this action")
    if approval.action_hash != action_hash(entry, record):
        raise ApprovalVoid(approval, "the approval was for a different action")
    if expired(approval):
        raise ApprovalVoid(approval, "the approval expired before it was used")
    approval.state = Approval.CONSUMED
    approval.save(update_fields=["state"])
    audit(
        tenant=record.tenant_id,
        actor=actor,
        action="approval.consumed",
        target=approval,
        source=source,
    )
    return approval


def invalidate(
    *, approval: ApprovalRequest, actor: str, detail: str, source: str = AuditEvent.Source.API
) -> bool:
    """Void an approval whose action changed or can no longer run; audited. Returns whether
    this call voided it."""
    with transaction.atomic():
        updated = ApprovalRequest.objects.filter(
            pk=approval.pk, state__in=ApprovalRequest.OPEN_STATES
        ).update(state=Approval.INVALIDATED)
        if updated:
            audit(
                tenant=approval.tenant_id,
                actor=actor,
                action="approval.invalidated",
                target=approval,
                source=source,
                detail=detail,
            )
    return bool(updated)
