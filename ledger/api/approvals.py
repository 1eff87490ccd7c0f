"""Approval endpoints: what waits for an approver, each request with its exact action and
dry-run diff, and a decision with its reason, under the console's rules: a person holding the
approver role in the tenant (``approvals:decide``, never a service account's), none of the
action's principals, once (``ledger.records.decide_approval``)."""

from __future__ import annotations

from django.http import HttpRequest
from ninja import Query, Router, Status

from ledger.api.auth import TokenAuth, caller_of
from ledger.api.parser import reject_unknown_query
from ledger.api.schemas import (
    ApprovalDecisionIn,
    ApprovalListQuery,
    ApprovalOut,
    ApprovalPolicyIn,
    ApprovalPolicyOut,
    Problem,
    WritePlanOut,
)
from ledger.errors import NotFound
from ledger.models import ApprovalPolicy, ApprovalRequest, AuditEvent
from ledger.permissions import Scope
from ledger.records import decide_approval
from ledger.services import approval_policies, approvals

router = Router(tags=["approvals"], auth=TokenAuth(Scope.APPROVALS_READ))
ERRORS = {400: Problem, 401: Problem, 403: Problem, 404: Problem, 409: Problem}


def _approvals(request: HttpRequest):  # type: ignore[no-untyped-def]
    return ApprovalRequest.objects.filter(tenant=caller_of(request).tenant).select_related(
        "record__tool", "entry__tool", "entry__run__combination", "entry__combination", "decided_by"
    )


def _get(request: HttpRequest, approval_id: int) -> ApprovalRequest:
    approval = _approvals(request).filter(pk=approval_id).first()
    if approval is None:
        raise NotFound(f"no approval {approval_id}")
    return approval


def approval_out(approval: ApprovalRequest, *, detail: bool = False) -> ApprovalOut:
    pending = approval.state == ApprovalRequest.State.PENDING
    void = approvals.void_reason(approval) if pending else None
    entry = approval.entry
    plan = approval.record.write_plan if detail else None
    return ApprovalOut(
        id=approval.pk,
        state=approval.state,
        open=pending and void is None,
        void_reason=void,
        call_id=str(entry.call_id),
        run_id=entry.run.run_id,
        tool=entry.tool.name,
        idempotency_key=approval.record.key,
        input=entry.input,
        action_hash=approval.action_hash,
        requested_by=approval.requested_by,
        created_at=approval.created_at,
        expires_at=approval.expires_at,
        decided_by=approval.decided_by.get_username() if approval.decided_by else None,
        decision_reason=approval.decision_reason,
        decided_at=approval.decided_at,
        write_plan=WritePlanOut(
            workspace=plan.workspace,
            path=plan.path,
            before_hash=plan.before_hash,
            after_hash=plan.after_hash,
            diff=plan.diff,
        )
        if plan is not None
        else None,
    )


@router.get("", response={200: list[ApprovalOut], **ERRORS}, summary="List approvals")
def list_approvals(request: HttpRequest, query: Query[ApprovalListQuery]) -> list[ApprovalOut]:
    """``state=open`` (the default): what an approver can still decide, oldest first; any other
    state: the requests in it, newest first. At most ``limit``; ``before`` pages on by id."""
    reject_unknown_query(request, ApprovalListQuery)
    found = _approvals(request)
    if query.state == "open":
        found = approvals.still_open(found).order_by("pk")
    else:
        found = found.filter(state=query.state).order_by("-pk")
    if query.before is not None:
        found = found.filter(pk__lt=query.before)
    return [approval_out(approval) for approval in found[: query.limit]]


@router.get(
    "/{int:approval_id}",
    response={200: ApprovalOut, **ERRORS},
    summary="Get an approval with its exact action and dry-run diff",
)
def get_approval(request: HttpRequest, approval_id: int) -> ApprovalOut:
    return approval_out(_get(request, approval_id), detail=True)


@router.post(
    "/{int:approval_id}/decide",
    response={200: ApprovalOut, **ERRORS},
    summary="Approve or reject",
    auth=TokenAuth(Scope.APPROVALS_DECIDE),
)
def decide(request: HttpRequest, approval_id: int, payload: ApprovalDecisionIn) -> ApprovalOut:
    """The token's owner decides, under the console's rules: a person with the approver role
    in this tenant and none of the action's principals (403 otherwise, audited); a request
    already decided, expired or whose action changed is 409. A rejection needs a reason: the
    model is told it; a rejected re-application of a write that did not land settles the
    call as not happened."""
    token = caller_of(request).token
    assert token is not None  # TokenAuth
    decided = decide_approval(
        approval=_get(request, approval_id),
        user=token.user,
        approve=payload.decision == "approve",
        reason=payload.reason,
        source=AuditEvent.Source.API,
    )
    return approval_out(_get(request, decided.pk), detail=True)


policies_router = Router(tags=["approval policies"], auth=TokenAuth(Scope.POLICIES))


def policy_out(policy: ApprovalPolicy) -> ApprovalPolicyOut:
    return ApprovalPolicyOut(
        id=policy.pk,
        name=policy.name,
        reason=policy.reason,
        tool=policy.tool,
        path=policy.path,
        operator=policy.operator,
        value=policy.value,
        write_prefix=policy.write_prefix,
        combination_id=policy.combination_id,
        asks_for=approval_policies.spec_of(policy).describe(),
        created_by=policy.created_by,
        created_at=policy.created_at,
    )


@policies_router.get("", response={200: list[ApprovalPolicyOut], **ERRORS}, summary="List")
def list_policies(request: HttpRequest) -> list[ApprovalPolicyOut]:
    """The tenant's approval policies, oldest first (the first that matches asks)."""
    found = ApprovalPolicy.objects.filter(tenant=caller_of(request).tenant).order_by("pk")
    return [policy_out(policy) for policy in found]


@policies_router.post(
    "", response={201: ApprovalPolicyOut, **ERRORS}, summary="Ask a human before some actions"
)
def add_policy(request: HttpRequest, payload: ApprovalPolicyIn) -> Status:
    """Add a policy (audited); from the next call on, a matching action waits for an approver
    before it first runs and the model is told ``APPROVAL_REQUIRED`` with its reason."""
    caller = caller_of(request)
    policy = approval_policies.add_policy(
        tenant=caller.tenant,
        actor=caller.identity,
        source=AuditEvent.Source.API,
        **payload.model_dump(),
    )
    return Status(201, policy_out(policy))


@policies_router.delete(
    "/{int:policy_id}", response={204: None, **ERRORS}, summary="Remove a policy"
)
def remove_policy(request: HttpRequest, policy_id: int) -> Status:
    """Remove a policy (audited); requests it opened stay as they are."""
    caller = caller_of(request)
    approval_policies.remove_policy(
        tenant=caller.tenant,
        policy_id=policy_id,
        actor=caller.identity,
        source=AuditEvent.Source.API,
    )
    return Status(204, None)
