"""Admin pages for every model, so the data can be inspected before the console exists.

Records, entries and audit events are read-only here: their state changes only through the
services, which check transitions and write the audit trail.
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.http import HttpRequest

from ledger import models


class ReadOnlyAdmin(admin.ModelAdmin):
    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(models.Tenant)
class TenantAdmin(admin.ModelAdmin):
    list_display = ("slug", "name", "created_at")
    search_fields = ("slug", "name")


@admin.register(models.ApiToken)
class ApiTokenAdmin(admin.ModelAdmin):
    list_display = ("name", "prefix", "tenant", "created_at", "revoked_at")
    list_filter = ("tenant",)
    readonly_fields = ("prefix", "token_hash", "created_at")

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # tokens are issued by `manage.py issue_token`, which shows them once


@admin.register(models.McpServer)
class McpServerAdmin(admin.ModelAdmin):
    list_display = ("name", "tenant", "trust", "created_at")
    list_filter = ("tenant", "trust")


@admin.register(models.Tool)
class ToolAdmin(ReadOnlyAdmin):
    list_display = ("name", "tenant", "kind", "idempotency", "replay_policy", "destructive", "rule")
    list_filter = ("tenant", "kind", "idempotency", "destructive")
    search_fields = ("name",)


@admin.register(models.PolicyRule)
class PolicyRuleAdmin(ReadOnlyAdmin):
    list_display = ("pattern", "tenant", "idempotency", "destructive", "priority")
    list_filter = ("tenant",)


@admin.register(models.VersionCombination)
class VersionCombinationAdmin(ReadOnlyAdmin):
    list_display = ("label", "tenant", "state", "model", "prompt", "canary_share_bp")
    list_filter = ("tenant", "state")


@admin.register(models.Run)
class RunAdmin(ReadOnlyAdmin):
    list_display = ("run_id", "tenant", "combination", "status", "started_at", "finished_at")
    list_filter = ("tenant", "status")
    search_fields = ("run_id",)


@admin.register(models.IdempotencyRecord)
class IdempotencyRecordAdmin(ReadOnlyAdmin):
    list_display = ("key", "tenant", "tool", "state", "executions", "duplicate_hits", "updated_at")
    list_filter = ("tenant", "state")
    search_fields = ("key",)
    list_select_related = ("tenant", "tool")


@admin.register(models.LedgerEntry)
class LedgerEntryAdmin(ReadOnlyAdmin):
    list_display = ("call_id", "tenant", "tool", "status", "decision", "created_at")
    list_filter = ("tenant", "status", "decision")
    search_fields = ("idempotency_key", "step_id")
    list_select_related = ("tenant", "tool")


@admin.register(models.WritePlan)
class WritePlanAdmin(ReadOnlyAdmin):
    list_display = ("workspace", "path", "tenant", "created_at")


@admin.register(models.ApprovalRequest)
class ApprovalRequestAdmin(ReadOnlyAdmin):
    list_display = ("pk", "tenant", "state", "requested_by", "decided_by", "created_at")
    list_filter = ("tenant", "state")


@admin.register(models.AuditEvent)
class AuditEventAdmin(ReadOnlyAdmin):
    list_display = (
        "created_at",
        "tenant",
        "actor",
        "action",
        "target_type",
        "target_id",
        "outcome",
        "source",
    )
    list_filter = ("tenant", "outcome", "source", "action")
    search_fields = ("actor", "action", "target_id")


@admin.register(models.MetricBucket)
class MetricBucketAdmin(ReadOnlyAdmin):
    list_display = (
        "bucket_start",
        "tenant",
        "combination",
        "tool_name",
        "keyed_requests",
        "dedup_hits",
        "became_uncertain",
        "duplicate_side_effects",
    )
    list_filter = ("tenant",)


@admin.register(models.MetricCursor)
class MetricCursorAdmin(ReadOnlyAdmin):
    list_display = ("name", "last_id")


@admin.register(models.Threshold)
class ThresholdAdmin(ReadOnlyAdmin):
    list_display = ("metric", "tenant", "above", "window_minutes", "action", "enabled")
    list_filter = ("tenant", "metric", "action")


@admin.register(models.AlertEvent)
class AlertEventAdmin(ReadOnlyAdmin):
    list_display = ("created_at", "tenant", "combination", "metric", "observed", "action")
    list_filter = ("tenant", "metric")
