"""Approval requests: a human decision on one action."""

from __future__ import annotations

from typing import ClassVar

from django.conf import settings
from django.contrib.postgres.fields import ArrayField
from django.db import models
from django.db.models import Q

from ledger.models.combinations import VersionCombination
from ledger.models.constraints import SHA256_HEX
from ledger.models.entries import LedgerEntry
from ledger.models.records import IdempotencyRecord
from ledger.models.tenancy import Tenant


class ApprovalPolicy(models.Model):
    """A manager's rule that a human approves an action before it first runs
    (``ledger.approval_policies`` says when one matches)."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="approval_policies")
    name = models.CharField(max_length=100)
    #: Told to the approver and the model: why a human decides.
    reason = models.CharField(max_length=500)
    tool = models.CharField(max_length=200, blank=True)
    path = models.CharField(max_length=200, blank=True)
    operator = models.CharField(max_length=16, blank=True)
    value = models.JSONField(null=True, blank=True)
    write_prefix = models.CharField(max_length=200, blank=True)
    combination = models.ForeignKey(
        VersionCombination, null=True, blank=True, on_delete=models.CASCADE, related_name="+"
    )
    created_by = models.CharField(max_length=200)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        verbose_name_plural = "approval policies"
        constraints: ClassVar = [
            models.UniqueConstraint(fields=["tenant", "name"], name="approvalpolicy_unique_name"),
            models.CheckConstraint(
                condition=~Q(tool="", path="", write_prefix=""), name="approvalpolicy_says_what"
            ),
            models.CheckConstraint(
                condition=Q(path="", operator="") | (~Q(path="") & ~Q(operator="")),
                name="approvalpolicy_condition_whole",
            ),
        ]

    def __str__(self) -> str:
        return self.name


class ApprovalRequest(models.Model):
    """A human decision on one action, bound to its action hash and usable once."""

    class State(models.TextChoices):
        PENDING = "pending"
        APPROVED = "approved"
        REJECTED = "rejected"
        CONSUMED = "consumed"
        INVALIDATED = "invalidated"
        EXPIRED = "expired"

    OPEN_STATES: ClassVar = [State.PENDING, State.APPROVED]

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="approvals")
    record = models.ForeignKey(
        IdempotencyRecord, on_delete=models.CASCADE, related_name="approvals"
    )
    entry = models.ForeignKey(LedgerEntry, on_delete=models.CASCADE, related_name="approvals")
    action_hash = models.CharField(max_length=64)
    state = models.CharField(max_length=16, choices=State.choices, default=State.PENDING)
    requested_by = models.CharField(max_length=200)
    # The user behind the request (its token's owner), who can never decide it; none for a
    # request the system made.
    requested_by_user = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="+",
    )
    # Every user who asked for the action: whoever opened the request and whoever joined it by
    # asking again. With the callers of the action's key (``approvals.principals_of``) none of
    # them may decide it.
    principal_ids = ArrayField(models.BigIntegerField(), default=list, blank=True)
    decided_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.PROTECT
    )
    #: The policy that asked a human before the action first ran (none for a replay's).
    policy = models.ForeignKey(
        ApprovalPolicy, null=True, blank=True, on_delete=models.SET_NULL, related_name="requests"
    )
    decision_reason = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    decided_at = models.DateTimeField(null=True, blank=True)
    expires_at = models.DateTimeField()

    class Meta:
        constraints: ClassVar = [
            models.UniqueConstraint(
                fields=["record"],
                condition=Q(state__in=["pending", "approved"]),
                name="one_open_approval_per_record",
            ),
            models.CheckConstraint(
                condition=~Q(state="rejected") | ~Q(decision_reason=""),
                name="approval_rejection_has_reason",
            ),
            models.CheckConstraint(
                condition=Q(action_hash__regex=SHA256_HEX), name="approval_action_hash_sha256"
            ),
        ]

    def __str__(self) -> str:
        return f"approval {self.pk} ({self.state})"
