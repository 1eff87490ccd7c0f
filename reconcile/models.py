"""What the reconciliation workers need: downstream adapters, attempts, heartbeats."""

from __future__ import annotations

from typing import Any, ClassVar
from urllib.parse import quote

from django.core.exceptions import ValidationError
from django.db import models
from django.db.models import Q

from ledger import outbound
from ledger.compensation import example_url
from ledger.models import IdempotencyRecord, Tenant, Tool


class DownstreamAdapter(models.Model):
    """How to ask a tool's downstream whether the action with a given key happened."""

    class Kind(models.TextChoices):
        HTTP = "http"
        PYTHON = "python"

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="adapters")
    tool = models.OneToOneField(Tool, on_delete=models.CASCADE, related_name="downstream")
    kind = models.CharField(max_length=16, choices=Kind.choices, default=Kind.HTTP)
    url_template = models.CharField(
        max_length=1000,
        blank=True,
        help_text="GET URL with {key} for the (URL-quoted) idempotency key.",
    )
    found_statuses = models.JSONField(default=list, help_text="e.g. [200]")
    not_found_statuses = models.JSONField(default=list, help_text="e.g. [404]")
    python_path = models.CharField(
        max_length=300, blank=True, help_text="module:callable implementing DownstreamLookup"
    )
    timeout_seconds = models.FloatField(default=5.0)
    grace_seconds = models.PositiveIntegerField(
        default=30, help_text="'Not found' only counts this long after the outcome went unknown."
    )
    max_attempts = models.PositiveIntegerField(
        default=5, help_text="Failed look-ups before a human is asked."
    )

    class Meta:
        constraints: ClassVar = [
            models.CheckConstraint(
                condition=(Q(kind="http") & ~Q(url_template=""))
                | (Q(kind="python") & ~Q(python_path="")),
                name="adapter_kind_configured",
            ),
            models.CheckConstraint(
                condition=Q(timeout_seconds__gt=0, max_attempts__gte=1),
                name="adapter_limits_positive",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.tool.name} ({self.kind})"

    def lookup_url(self, idempotency_key: str) -> str:
        """The URL that looks ``idempotency_key`` up (quoted: a key cannot change the path)."""
        return self.url_template.replace("{key}", quote(idempotency_key, safe=""))

    def clean(self) -> None:
        """An HTTP adapter's URL must pass the outbound allow-list when it is registered, as
        every look-up does again when it is sent."""
        if self.kind == self.Kind.HTTP and self.url_template:
            _check_outbound(self.lookup_url("key"))


class ReconcileAttempt(models.Model):
    """One try at settling an unknown record: who, when, what it found."""

    class Kind(models.TextChoices):
        DOWNSTREAM = "downstream"
        FILE_HASH = "file_hash"
        NONE = "none"

    class Answer(models.TextChoices):
        """What the look-up was answered (an attempt's ``outcome``)."""

        FOUND = "found"
        NOT_FOUND = "not_found"
        NOT_FOUND_IN_GRACE = "not_found_in_grace"
        UNREACHABLE = "unreachable"
        TIMEOUT = "timeout"
        MALFORMED = "malformed"
        ALREADY_APPLIED = "already_applied"
        APPLY_AGAIN = "apply_again"
        CONFLICT = "conflict"
        NO_CHECK = "no_check"
        REFUSED = "refused"

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+")
    record = models.ForeignKey(
        IdempotencyRecord, on_delete=models.CASCADE, related_name="reconcile_attempts_log"
    )
    attempt = models.PositiveIntegerField()
    kind = models.CharField(max_length=16, choices=Kind.choices)
    outcome = models.CharField(max_length=24, choices=Answer.choices)
    detail = models.TextField(blank=True)
    evidence = models.JSONField(null=True, blank=True, help_text="Redacted.")
    worker = models.CharField(max_length=200)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        indexes: ClassVar = [
            models.Index(fields=["record", "created_at"], name="attempt_record_idx")
        ]

    def __str__(self) -> str:
        return f"{self.record_id} #{self.attempt} {self.outcome}"

    @property
    def evidence_shown(self) -> Any:
        """The evidence as a look-up's line shows it: a file's snapshot has a card of its own
        on the call's page (``console.selectors.file_now``)."""
        if isinstance(self.evidence, dict) and "snapshot" in self.evidence:
            return {key: value for key, value in self.evidence.items() if key != "snapshot"}
        return self.evidence


class Heartbeat(models.Model):
    """When a periodic sweep last ran on a worker. The console warns operators when it is
    stale: unknown calls are then not being looked up (no worker, or no beat)."""

    SCHEDULER = "schedule_reconciliation"

    name = models.CharField(max_length=50, unique=True)
    beat_at = models.DateTimeField()

    def __str__(self) -> str:
        return f"{self.name} at {self.beat_at:%Y-%m-%d %H:%M:%S}"


class CompensationAdapter(models.Model):
    """How a worker runs a compensating tool: an HTTP POST of the arguments as JSON, with the
    compensation's key as ``Idempotency-Key`` (docs/compensation.md). Its outbound requests
    pass ``ledger.outbound``'s allow-list."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+")
    tool = models.OneToOneField(Tool, on_delete=models.CASCADE, related_name="compensation_adapter")
    url_template = models.CharField(
        max_length=1000, help_text="POST URL; {name} is replaced by that argument, URL-quoted."
    )
    success_statuses = models.JSONField(default=list, help_text="e.g. [200, 201]")
    timeout_seconds = models.FloatField(default=10.0)

    class Meta:
        constraints: ClassVar = [
            models.CheckConstraint(
                condition=Q(timeout_seconds__gt=0) & ~Q(url_template=""),
                name="compensationadapter_configured",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.tool.name} -> {self.url_template}"

    def clean(self) -> None:
        """The URL must pass the outbound allow-list when the adapter is registered, as every
        compensation does again when it is previewed and sent."""
        if self.url_template:
            _check_outbound(example_url(self.url_template))


def _check_outbound(url: str) -> None:
    """A form error on ``url_template`` unless ``url`` passes ``ledger.outbound``."""
    try:
        outbound.check_url(url)
    except outbound.OutboundRefused as exc:
        raise ValidationError({"url_template": str(exc)}) from None
