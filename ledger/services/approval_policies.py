"""A tenant's approval policies, set by a manager and audited (``ledger.approval_policies`` says
what one asks for). The call path reads them with its run (``ledger.calls.selectors``)."""

from __future__ import annotations

from typing import Any

from django.db import IntegrityError, transaction

from ledger.approval_policies import PolicySpec, spec_problem
from ledger.errors import Conflict, InvalidInput, NotFound
from ledger.models import ApprovalPolicy, Tenant, VersionCombination
from ledger.redaction import redact_for_column
from ledger.services.audit import audit


def spec_of(policy: ApprovalPolicy) -> PolicySpec:
    return PolicySpec(
        id=policy.pk,
        name=policy.name,
        reason=policy.reason,
        tool=policy.tool,
        path=policy.path,
        operator=policy.operator,
        value=policy.value,
        write_prefix=policy.write_prefix,
        combination_id=policy.combination_id,
    )


def add_policy(
    *,
    tenant: Tenant,
    actor: str,
    source: str,
    name: str,
    reason: str,
    tool: str = "",
    path: str = "",
    operator: str = "",
    value: Any = None,
    write_prefix: str = "",
    combination_id: int | None = None,
) -> ApprovalPolicy:
    """Add a policy, audited; ``InvalidInput`` says what is wrong and nothing is written. Its
    reason, which approvers and the model read, is stored redacted."""
    name, reason = name.strip(), reason.strip()
    if not name or len(name) > 100:
        raise InvalidInput("a policy needs a name of at most 100 characters")
    if not reason or len(reason) > 500:
        raise InvalidInput(
            "say why a human decides (at most 500 characters): the approver and the model read it"
        )
    problem = spec_problem(
        tool=tool, path=path, operator=operator, value=value, write_prefix=write_prefix
    )
    if problem is not None:
        raise InvalidInput(problem)
    reason = redact_for_column(reason, ApprovalPolicy._meta.get_field("reason").max_length)
    if (
        combination_id is not None
        and not VersionCombination.objects.filter(tenant=tenant, pk=combination_id).exists()
    ):
        raise NotFound(f"no combination {combination_id}")
    try:
        with transaction.atomic():
            policy = ApprovalPolicy.objects.create(
                tenant=tenant,
                name=name,
                reason=reason,
                tool=tool,
                path=path,
                operator=operator,
                value=value,
                write_prefix=write_prefix,
                combination_id=combination_id,
                created_by=actor,
            )
            audit(
                tenant=tenant,
                actor=actor,
                action="approval_policy.added",
                target=policy,
                source=source,
                after={**_described(policy)},
                detail=reason,
            )
    except IntegrityError:
        raise Conflict(f"a policy named {name!r} exists already") from None
    return policy


def remove_policy(*, tenant: Tenant, policy_id: int, actor: str, source: str) -> None:
    """Remove a policy, audited. Requests it already opened stay as they are."""
    with transaction.atomic():
        policy = (
            ApprovalPolicy.objects.select_for_update().filter(tenant=tenant, pk=policy_id).first()
        )
        if policy is None:
            raise NotFound(f"no approval policy {policy_id}")
        audit(
            tenant=tenant,
            actor=actor,
            action="approval_policy.removed",
            target=policy,
            source=source,
            before=_described(policy),
        )
        policy.delete()


def _described(policy: ApprovalPolicy) -> dict[str, Any]:
    return {
        "name": policy.name,
        "asks_for": spec_of(policy).describe(),
        "combination": policy.combination_id,
    }
