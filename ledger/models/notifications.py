"""On-call policies, notification channels and the notifications sent through them."""

from __future__ import annotations

from typing import ClassVar

from django.db import models
from django.db.models import Q
from django.db.models.functions import Now

from ledger.models.tenancy import Tenant


class OnCallPolicy(models.Model):
    """How long an approval or an unknown call may wait on a human before people are told: the
    first service level notifies tier 1, the second escalates to tier 2. A tenant without one
    has the defaults."""

    tenant = models.OneToOneField(Tenant, on_delete=models.CASCADE, related_name="on_call")
    first_sla_minutes = models.PositiveIntegerField(default=15)
    second_sla_minutes = models.PositiveIntegerField(default=60)
    expiry_warning_minutes = models.PositiveIntegerField(
        default=10, help_text="An open approval this close to its expiry is announced."
    )
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        verbose_name_plural = "on-call policies"
        constraints: ClassVar = [
            models.CheckConstraint(
                condition=Q(first_sla_minutes__gte=1)
                & Q(second_sla_minutes__gt=models.F("first_sla_minutes"))
                & Q(expiry_warning_minutes__gte=1),
                name="on_call_sla_order",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.tenant_id}: {self.first_sla_minutes}/{self.second_sla_minutes} min"


class NotificationChannel(models.Model):
    """Where one role of one tenant is told about what waits on it, at one escalation tier.
    ``target`` is an e-mail address or a webhook URL, which often carries a token: it is shown
    masked and never logged."""

    class Role(models.TextChoices):
        # The console's roles that act on what a notification announces.
        OPERATOR = "operator"
        APPROVER = "approver"
        MANAGER = "manager"

    class Kind(models.TextChoices):
        EMAIL = "email"
        WEBHOOK = "webhook"  # the generic JSON payload
        SLACK = "slack"  # a Slack-compatible incoming-webhook payload

    tenant = models.ForeignKey(
        Tenant, on_delete=models.CASCADE, related_name="notification_channels"
    )
    role = models.CharField(max_length=16, choices=Role.choices)
    tier = models.PositiveSmallIntegerField(default=1)
    kind = models.CharField(max_length=16, choices=Kind.choices)
    target = models.CharField(max_length=500)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints: ClassVar = [
            models.UniqueConstraint(
                fields=["tenant", "role", "tier", "kind", "target"],
                name="notification_channel_unique",
            ),
            models.CheckConstraint(condition=Q(tier__in=[1, 2]), name="notification_tier_valid"),
            models.CheckConstraint(
                condition=Q(role__in=["operator", "approver", "manager"]),
                name="notification_role_valid",
            ),
            models.CheckConstraint(
                condition=Q(kind__in=["email", "webhook", "slack"]),
                name="notification_kind_valid",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.role} tier {self.tier} {self.kind} {self.masked_target}"

    @property
    def masked_target(self) -> str:
        """The target without its secrets: a webhook's scheme and host, an address's domain."""
        if self.kind == self.Kind.EMAIL:
            return "…@" + self.target.rpartition("@")[2]
        scheme, _, rest = self.target.partition("://")
        return f"{scheme}://{rest.split('/', 1)[0].rpartition('@')[2]}/…"


class Notification(models.Model):
    """One message to one channel about one waiting item. The unique constraint is the rule
    "at most one notification per item and tier": concurrent sweeps insert the same rows and
    all but one insert is a no-op."""

    class Event(models.TextChoices):
        APPROVAL_REQUESTED = "approval_requested"
        UNKNOWN_ESCALATED = "unknown_escalated"
        SLA_EXCEEDED = "sla_exceeded"  # the channel's tier says which service level
        APPROVAL_EXPIRING = "approval_expiring"
        COMBINATION_HALTED = "combination_halted"
        THRESHOLD_CROSSED = "threshold_crossed"

    class Subject(models.TextChoices):
        APPROVAL = "approval"
        RECORD = "record"
        COMBINATION = "combination"
        ALERT = "alert"

    class State(models.TextChoices):
        PENDING = "pending"
        SENDING = "sending"
        DELIVERED = "delivered"
        FAILED = "failed"

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="notifications")
    channel = models.ForeignKey(
        NotificationChannel, on_delete=models.CASCADE, related_name="notifications"
    )
    event = models.CharField(max_length=32, choices=Event.choices)
    subject_type = models.CharField(max_length=16, choices=Subject.choices)
    subject_id = models.BigIntegerField()
    state = models.CharField(max_length=16, choices=State.choices, default=State.PENDING)
    attempts = models.PositiveIntegerField(default=0)
    # Both by the database's clock (one clock): set in the statements that claim and retry.
    next_attempt_at = models.DateTimeField(db_default=Now())
    claimed_until = models.DateTimeField(null=True, blank=True)
    last_error = models.CharField(max_length=300, blank=True)
    created_at = models.DateTimeField(db_default=Now())
    delivered_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints: ClassVar = [
            models.UniqueConstraint(
                fields=["channel", "event", "subject_type", "subject_id"],
                name="notification_once_per_item_and_tier",
            ),
            models.CheckConstraint(
                condition=Q(state__in=["pending", "sending", "delivered", "failed"]),
                name="notification_state_valid",
            ),
        ]
        indexes: ClassVar = [
            models.Index(
                fields=["next_attempt_at"],
                condition=Q(state__in=["pending", "sending"]),
                name="notification_due_idx",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.event} {self.subject_type}:{self.subject_id} -> {self.channel_id}"
