"""The console's own state: who is looking at an approval, a user's preferences, the
per-minute windows that bound the logs of denials, and the installation's security log.
Memberships and roles are the ledger's (``ledger.models.Membership``, ``ledger.permissions``)."""

from __future__ import annotations

from typing import ClassVar

from django.conf import settings
from django.db import models

from ledger.models import AuditEvent, Tenant


class ApprovalClaim(models.Model):
    """Who is looking at a pending approval right now, so a second approver sees it is taken.

    A presence marker, not a lock: the approval itself is single-use, so a second decision fails
    whatever this says. A claim older than ``console.claims.CLAIM_TTL`` no longer counts.
    """

    approval = models.OneToOneField(
        "ledger.ApprovalRequest", on_delete=models.CASCADE, related_name="claim"
    )
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE)
    claimed_at = models.DateTimeField()

    def __str__(self) -> str:
        return f"{self.approval_id} by {self.user_id}"


class Preferences(models.Model):
    """A console user's own settings: the language the console speaks to them in and the time
    zone it shows times in (an IANA name; blank: UTC)."""

    user = models.OneToOneField(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="console_preferences"
    )
    language = models.CharField(max_length=16, choices=settings.LANGUAGES, blank=True)
    time_zone = models.CharField(max_length=64, blank=True, default="")

    def __str__(self) -> str:
        return f"{self.user_id}: {self.language}"


class DenialWindow(models.Model):
    """How many denials of one actor (a user, a token, an address) fell in one minute of one
    log: the first few are events of that log, the rest only counted here, so a flood of
    refused requests cannot flood an append-only log. A past window's count becomes one summary
    event (``console.denials``)."""

    class Log(models.TextChoices):
        AUDIT = "audit"  # the tenant's audit (ledger.AuditEvent)
        SECURITY = "security"  # the installation's security log (SecurityEvent)

    key = models.CharField(max_length=200)
    log = models.CharField(max_length=16, choices=Log.choices, default=Log.AUDIT)
    window_start = models.DateTimeField()
    audited = models.PositiveIntegerField(default=0)
    suppressed = models.PositiveIntegerField(default=0)
    tenant = models.ForeignKey(Tenant, null=True, blank=True, on_delete=models.CASCADE)

    class Meta:
        constraints: ClassVar = [
            models.UniqueConstraint(
                fields=["key", "log", "window_start"], name="denialwindow_unique"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.key} @ {self.window_start} ({self.log}): {self.audited} + {self.suppressed}"


class SecurityEvent(models.Model):
    """A refused request kept for the installation's admins (superusers) and for no tenant:
    another tenant's object or an id that names nothing, a signed-in user who is a member of
    no tenant, a request without a valid API token, an API id not found, a page of ``/admin/``
    or ``/metrics`` refused (``console.denials.log_of``). No tenant's audit holds these, so a
    probe's answer is all its prober learns. Append-only, as the audit is (migration 0007)."""

    #: The actor's own tenant, where they have one (the tenant they work in, their token's):
    #: never the tenant whose object was asked for.
    tenant = models.ForeignKey(
        Tenant, null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    actor = models.CharField(max_length=200)
    action = models.CharField(max_length=100)
    reason = models.CharField(max_length=32, blank=True)
    target_type = models.CharField(max_length=50)
    target_id = models.CharField(max_length=100)
    source = models.CharField(max_length=16, choices=AuditEvent.Source.choices)
    #: The request (method, path) or, for a minute's summary, its counts.
    facts = models.JSONField(default=dict, blank=True)
    detail = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        indexes: ClassVar = [
            models.Index(fields=["created_at"], name="securityevent_time_idx"),
            models.Index(fields=["actor", "created_at"], name="securityevent_actor_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.actor} {self.action} {self.target_type}:{self.target_id} ({self.reason})"
