"""The append-only audit log."""

from __future__ import annotations

from typing import ClassVar

from django.db import models

from ledger.models.tenancy import Tenant


class AuditEvent(models.Model):
    """Append-only: a database trigger rejects UPDATE and DELETE (see migration 0002)."""

    class Outcome(models.TextChoices):
        SUCCESS = "success"
        DENIED = "denied"

    class Source(models.TextChoices):
        API = "api"
        CONSOLE = "console"
        WORKER = "worker"
        SYSTEM = "system"
        CLI = "cli"
        ADMIN = "admin"

    tenant = models.ForeignKey(
        Tenant, null=True, blank=True, on_delete=models.PROTECT, related_name="audit_events"
    )
    actor = models.CharField(max_length=200)
    action = models.CharField(max_length=100)
    target_type = models.CharField(max_length=50)
    target_id = models.CharField(max_length=100)
    before = models.JSONField(null=True, blank=True)
    after = models.JSONField(null=True, blank=True)
    source = models.CharField(max_length=16, choices=Source.choices)
    outcome = models.CharField(max_length=16, choices=Outcome.choices, default=Outcome.SUCCESS)
    detail = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        indexes: ClassVar = [
            models.Index(fields=["tenant", "created_at"], name="audit_tenant_time_idx"),
            # The console's audit log, newest first by id and keyset-paged on it (make bench).
            models.Index(fields=["tenant", "id"], name="audit_tenant_id_idx"),
            models.Index(fields=["target_type", "target_id"], name="audit_target_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.actor} {self.action} {self.target_type}:{self.target_id}"
