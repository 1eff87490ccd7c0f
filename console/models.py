"""The console's own state: who is looking at an approval, a user's preferences, and the
per-minute windows that bound the audit of denials. Memberships and roles are the ledger's
(``ledger.models.Membership``, ``ledger.permissions``)."""

from __future__ import annotations

from typing import ClassVar

from django.conf import settings
from django.db import models

from ledger.models import Tenant


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
    """A console user's own settings: the language the console speaks to them in."""

    user = models.OneToOneField(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="console_preferences"
    )
    language = models.CharField(max_length=16, choices=settings.LANGUAGES)

    def __str__(self) -> str:
        return f"{self.user_id}: {self.language}"


class DenialWindow(models.Model):
    """How many denials of one actor (or address) fell in one minute: the first few are audit
    events, the rest only counted here, so a flood of refused requests cannot flood the
    append-only audit table. A past window's count becomes one summary event
    (``console.denials``)."""

    key = models.CharField(max_length=200)
    window_start = models.DateTimeField()
    audited = models.PositiveIntegerField(default=0)
    suppressed = models.PositiveIntegerField(default=0)
    tenant = models.ForeignKey(Tenant, null=True, blank=True, on_delete=models.CASCADE)

    class Meta:
        constraints: ClassVar = [
            models.UniqueConstraint(fields=["key", "window_start"], name="denialwindow_unique"),
        ]

    def __str__(self) -> str:
        return f"{self.key} @ {self.window_start}: {self.audited} + {self.suppressed}"
