"""Metric buckets, thresholds and the alerts they raise."""

from __future__ import annotations

from typing import ClassVar

from django.db import models
from django.db.models import Q

from ledger.models.combinations import VersionCombination
from ledger.models.tenancy import Tenant


class MetricBucket(models.Model):
    """Counters per tenant, combination, tool and 5-minute bucket, kept by a periodic rollup
    (``ledger.services.metrics.roll_up``), so dashboards never scan the ledger."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+")
    combination = models.ForeignKey(
        VersionCombination, null=True, blank=True, on_delete=models.CASCADE, related_name="+"
    )
    tool_name = models.CharField(max_length=200)
    bucket_start = models.DateTimeField()
    keyed_requests = models.PositiveIntegerField(default=0)
    dedup_hits = models.PositiveIntegerField(default=0)
    executions = models.PositiveIntegerField(default=0)
    became_uncertain = models.PositiveIntegerField(default=0)
    duplicate_side_effects = models.PositiveIntegerField(default=0)
    decided_execute = models.PositiveIntegerField(default=0)
    decided_recorded_result = models.PositiveIntegerField(default=0)
    decided_wait = models.PositiveIntegerField(default=0)
    decided_approval_required = models.PositiveIntegerField(default=0)
    decided_forbidden = models.PositiveIntegerField(default=0)
    decided_conflict = models.PositiveIntegerField(default=0)
    decided_shadow_dry_run = models.PositiveIntegerField(default=0)

    class Meta:
        constraints: ClassVar = [
            models.UniqueConstraint(
                fields=["tenant", "combination", "tool_name", "bucket_start"],
                name="metric_bucket_unique",
                nulls_distinct=False,
            ),
        ]
        indexes: ClassVar = [
            models.Index(fields=["tenant", "bucket_start"], name="metric_tenant_time_idx"),
            models.Index(fields=["combination", "bucket_start"], name="metric_combo_time_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.tool_name} @ {self.bucket_start}"


class ReconcileBucket(models.Model):
    """Reconciliation attempts per tenant, outcome and 5-minute bucket, folded by the rollup
    from the attempts' audit events. The attempts' own rows go with their record at TTL
    cleanup; these stay, so the counts read from them never go down."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+")
    outcome = models.CharField(max_length=24)
    bucket_start = models.DateTimeField()
    attempts = models.PositiveIntegerField(default=0)

    class Meta:
        constraints: ClassVar = [
            models.UniqueConstraint(
                fields=["tenant", "outcome", "bucket_start"], name="reconcile_bucket_unique"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.outcome} @ {self.bucket_start}: {self.attempts}"


class MetricCursor(models.Model):
    """How far the rollup has read an append-only source (entries, audit events)."""

    name = models.CharField(max_length=50, unique=True)
    last_id = models.BigIntegerField(default=0)

    def __str__(self) -> str:
        return f"{self.name}: {self.last_id}"


class Threshold(models.Model):
    """A limit on a metric over a window; crossing it alerts, or halts the combination."""

    class Metric(models.TextChoices):
        DEDUP_HIT_RATE = "dedup_hit_rate"
        UNCERTAIN_RESULTS = "uncertain_results"
        DUPLICATE_SIDE_EFFECTS = "duplicate_side_effects"

    class Action(models.TextChoices):
        ALERT = "alert"
        HALT = "halt"

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="thresholds")
    metric = models.CharField(max_length=32, choices=Metric.choices)
    above = models.FloatField(help_text="Crossed when the metric exceeds this value.")
    window_minutes = models.PositiveIntegerField(default=15)
    min_requests = models.PositiveIntegerField(
        default=20, help_text="Rates are judged only over at least this many keyed requests."
    )
    action = models.CharField(max_length=8, choices=Action.choices, default=Action.ALERT)
    email = models.EmailField(blank=True)
    webhook_url = models.URLField(blank=True)
    enabled = models.BooleanField(default=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints: ClassVar = [
            models.CheckConstraint(
                condition=Q(window_minutes__gte=1, above__gte=0), name="threshold_sane"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.metric} > {self.above} over {self.window_minutes} min -> {self.action}"


class AlertEvent(models.Model):
    """A threshold crossing, with what was done about it."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="alerts")
    threshold = models.ForeignKey(Threshold, on_delete=models.CASCADE, related_name="events")
    combination = models.ForeignKey(
        VersionCombination, on_delete=models.CASCADE, related_name="alerts"
    )
    metric = models.CharField(max_length=32)
    observed = models.FloatField()
    action = models.CharField(max_length=8)
    delivery = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return f"{self.metric}={self.observed} on {self.combination_id}"
