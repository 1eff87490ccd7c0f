"""Small builders for test data. They go through the services wherever one exists."""

from __future__ import annotations

import itertools
from typing import Any

from django.contrib.auth import get_user_model

from ledger.domain import DataClassification, ReplayPolicy
from ledger.keys import fingerprint
from ledger.models import IdempotencyRecord, LedgerEntry, Membership, Run, Tenant, Tool
from ledger.permissions import Role
from ledger.records import Reservation, reserve_key
from ledger.services import approvals
from ledger.services.registry import register_tool

_counter = itertools.count(1)


def make_tenant(slug: str | None = None) -> Tenant:
    slug = slug or f"tenant-{next(_counter)}"
    return Tenant.objects.create(slug=slug, name=slug.title())


def make_tool(tenant: Tenant, name: str, **kwargs: Any) -> Tool:
    return register_tool(tenant=tenant, name=name, actor="test", source="system", **kwargs)


def reserve(
    tenant: Tenant,
    tool: Tool,
    key: str = "agent:acme:u1:run-1:create_order:cart-1",
    params: Any = None,
    *,
    owner: str = "worker-1",
    **kwargs: Any,
) -> Reservation:
    kwargs.setdefault("data_classification", DataClassification.INTERNAL)
    return reserve_key(
        tenant=tenant,
        tool=tool,
        key=key,
        fingerprint=fingerprint(params if params is not None else {"cart": "cart-1"}),
        replay_policy=ReplayPolicy(tool.replay_policy),
        lease_owner=owner,
        actor=owner,
        **kwargs,
    )


def refresh(record: IdempotencyRecord) -> IdempotencyRecord:
    return IdempotencyRecord.objects.get(pk=record.pk)


def make_run(tenant: Tenant, run_id: str = "run-1") -> Run:
    return Run.objects.get_or_create(tenant=tenant, run_id=run_id, defaults={"user_id": "u1"})[0]


def make_entry(tenant: Tenant, tool: Tool, *, status: str = "planned") -> LedgerEntry:
    return LedgerEntry.objects.create(
        tenant=tenant,
        step_id=f"step-{next(_counter)}",
        run=make_run(tenant),
        tool=tool,
        input_hash=fingerprint({}),
        input={},
        status=status,
        idempotency=tool.idempotency,
        replay_policy=tool.replay_policy,
        classification_reason=tool.reason,
        classification_rule=tool.rule,
        decision="execute",
        input_source="model",
        data_classification="internal",
    )


def granted_entry(record: IdempotencyRecord, tool: Tool) -> LedgerEntry:
    """A call of ``record``'s action whose approval a human granted: ready to start."""
    entry = make_entry(record.tenant, tool)
    entry.record = record
    entry.save(update_fields=["record"])
    approval = approvals.request_approval(record=record, entry=entry, requested_by="runtime")
    approvals.decide(
        approval=approval, user=make_approver(record.tenant), approve=True, reason="go ahead"
    )
    return entry


def make_approver(tenant: Tenant, name: str | None = None, password: str | None = None) -> Any:
    """A person with the approver role in ``tenant``: who may decide its approvals."""
    user = get_user_model().objects.create_user(
        name or f"approver-{next(_counter)}", password=password
    )
    Membership.objects.create(user=user, tenant=tenant, role=Role.APPROVER)
    return user
