"""Declared compensations and the compensations run from them."""

from __future__ import annotations

from typing import ClassVar

from django.db import models
from django.db.models import Q

from ledger.models.combinations import Run
from ledger.models.records import IdempotencyRecord
from ledger.models.registry import Tool
from ledger.models.tenancy import Tenant


class DeclaredCompensation(models.Model):
    """How an action is undone (docs/compensation.md): the compensating tool and where each of
    its arguments comes from in the original call (``ledger.compensation``). Declared for a
    tool, or by the runtime for one call before it runs (that one wins)."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+")
    tool = models.OneToOneField(
        Tool, null=True, blank=True, on_delete=models.CASCADE, related_name="compensation"
    )
    record = models.OneToOneField(
        IdempotencyRecord,
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="declared_compensation",
    )
    compensating_tool = models.ForeignKey(Tool, on_delete=models.PROTECT, related_name="+")
    arguments = models.JSONField(help_text='e.g. {"order_id": "result.id"}')
    declared_by = models.CharField(max_length=200)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints: ClassVar = [
            models.CheckConstraint(
                condition=Q(tool__isnull=False, record__isnull=True)
                | Q(tool__isnull=True, record__isnull=False),
                name="declaredcompensation_for_tool_or_call",
            ),
        ]

    def __str__(self) -> str:
        return f"-> {self.compensating_tool_id} {self.arguments}"


class Compensation(models.Model):
    """The compensation requested for one succeeded action. It runs as a record of its own,
    whose key is ``key`` (the original's with ``ledger.compensation.KEY_SUFFIX``); ``tool``,
    ``arguments`` and ``url`` are the exact call that was previewed."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+")
    original = models.OneToOneField(
        IdempotencyRecord, on_delete=models.CASCADE, related_name="compensation"
    )
    key = models.CharField(max_length=1024)
    tool = models.ForeignKey(Tool, on_delete=models.PROTECT, related_name="+")
    arguments = models.JSONField()
    url = models.CharField(max_length=2000)
    # The original's run: a run is compensated as a whole through it (a saga).
    run = models.ForeignKey(
        Run, null=True, blank=True, on_delete=models.PROTECT, related_name="compensations"
    )
    requested_by = models.CharField(max_length=200)
    # Why the requester asked, redacted as any text a person writes (``redact_text``): the
    # approver reads it.
    reason = models.TextField(blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints: ClassVar = [
            models.UniqueConstraint(fields=["tenant", "key"], name="compensation_unique_key"),
        ]

    def __str__(self) -> str:
        return self.key
