"""The append-only audit log."""

from __future__ import annotations

from typing import ClassVar

from django.db import models

from ledger.models.tenancy import Tenant


class AuditEvent(models.Model):
    """Append-only: a database trigger rejects UPDATE and DELETE, but for the one update that
    seals an unsealed event (migration 0024).

    Events are inserted unsealed (``seq``, ``prev_digest`` and ``digest`` NULL), each in the
    statement of its change, with no lock; the sealer (``ledger.services.audit_sealing``) then
    gives each its place in its tenant's hash chain (``ledger.audit_chain``)."""

    class Result(models.TextChoices):
        """Whether the action was done or refused (an event's ``outcome``)."""

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
    outcome = models.CharField(max_length=16, choices=Result.choices, default=Result.SUCCESS)
    detail = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    # The seal: the event's place in its tenant's chain, the digest of the event before it and
    # its own (ledger/audit_chain.py says what a digest covers). NULL, all three, until it is
    # sealed: the digests are absent then, not empty (``audit_seal_whole``).
    seq = models.BigIntegerField(null=True, blank=True, editable=False)
    prev_digest = models.CharField(max_length=64, null=True, blank=True, editable=False)  # noqa: DJ001
    digest = models.CharField(max_length=64, null=True, blank=True, editable=False)  # noqa: DJ001

    class Meta:
        constraints: ClassVar = [
            # One event per place in a chain; the events of no tenant form one chain too.
            models.UniqueConstraint(
                fields=["tenant", "seq"],
                condition=models.Q(seq__isnull=False),
                nulls_distinct=False,
                name="audit_chain_seq_unique",
            ),
            # Sealed whole or not at all, with digests that are sha256 in hex.
            models.CheckConstraint(
                condition=models.Q(seq__isnull=True, prev_digest__isnull=True, digest__isnull=True)
                | models.Q(
                    seq__gte=1,
                    prev_digest__regex=r"^[0-9a-f]{64}$",
                    digest__regex=r"^[0-9a-f]{64}$",
                ),
                name="audit_seal_whole",
            ),
        ]
        indexes: ClassVar = [
            models.Index(fields=["tenant", "created_at"], name="audit_tenant_time_idx"),
            # The console's audit log, newest first by id and keyset-paged on it (make bench).
            models.Index(fields=["tenant", "id"], name="audit_tenant_id_idx"),
            models.Index(fields=["target_type", "target_id"], name="audit_target_idx"),
            # What the sealer has left to do: a handful of rows, whatever the table's size.
            models.Index(
                fields=["tenant", "id"],
                condition=models.Q(seq__isnull=True),
                name="audit_unsealed_idx",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.actor} {self.action} {self.target_type}:{self.target_id}"
