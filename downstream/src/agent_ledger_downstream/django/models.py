from __future__ import annotations

from typing import ClassVar

from django.db import models
from django.db.models import Q
from django.db.models.functions import Now

from agent_ledger_downstream.protocol import MAX_KEY_LENGTH, TABLE


class IdempotencyKey(models.Model):
    """The stored response of a completed request, written in the route's own transaction."""

    #: The caller the key belongs to: one client's key never answers another's request.
    scope = models.TextField(default="", blank=True)
    key = models.CharField(max_length=MAX_KEY_LENGTH)
    fingerprint = models.CharField(max_length=64)
    method = models.CharField(max_length=16)
    path = models.TextField()
    status = models.PositiveSmallIntegerField()
    content_type = models.CharField(max_length=255)
    body = models.BinaryField()
    # PostgreSQL's clock, which the clean-up's cutoff also reads.
    created_at = models.DateTimeField(db_default=Now(), db_index=True)

    objects: ClassVar[models.Manager[IdempotencyKey]] = models.Manager()

    class Meta:
        db_table = TABLE
        constraints: ClassVar = [
            models.UniqueConstraint(
                fields=["scope", "key"], name="idempotency_key_unique_in_scope"
            ),
            models.CheckConstraint(
                condition=Q(status__gte=200, status__lt=300), name="idempotency_key_status_2xx"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.key} -> {self.status}"
