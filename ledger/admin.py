"""Admin pages for every model, so the data can be inspected before the console exists.

Records, entries and audit events are read-only here: their state changes only through the
services, which check transitions and write the audit trail. What can be changed here is
audited too (``AuditedAdmin``).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from django.contrib import admin
from django.core.serializers.json import DjangoJSONEncoder
from django.db import models as db
from django.http import HttpRequest

from ledger import models
from ledger.services.audit import audit

# Never copied into an audit event, even hashed.
SECRET_FIELDS = frozenset({"password", "token_hash"})


def _values(obj: db.Model, names: Iterable[str]) -> dict[str, Any]:
    fields = {f.name: f for f in obj._meta.concrete_fields}
    picked = {
        name: fields[name].value_from_object(obj)
        for name in names
        if name in fields and name not in SECRET_FIELDS
    }
    return json.loads(json.dumps(picked, cls=DjangoJSONEncoder))


def audit_every_admin(site: admin.AdminSite) -> None:
    """Make every registered ModelAdmin audited, the other apps' too (users, groups, sign-in
    lock-outs): their own class with ``AuditedAdmin`` mixed in."""
    for model, model_admin in list(site._registry.items()):
        if isinstance(model_admin, AuditedAdmin):
            continue
        cls = type(model_admin)
        site.unregister(model)
        site.register(model, type(f"Audited{cls.__name__}", (AuditedAdmin, cls), {}))


class AuditedAdmin(admin.ModelAdmin):
    """Every add, change and delete made in /admin/ is an audit event (source ``admin``), written
    in the admin's own transaction, with the changed fields' values before and after."""

    def _tenant_of(self, obj: db.Model) -> int | None:
        if isinstance(obj, models.Tenant):
            return obj.pk
        tenant_id = getattr(obj, "tenant_id", None)
        return tenant_id if isinstance(tenant_id, int) else None

    def _audit(self, request: HttpRequest, obj: db.Model, verb: str, **values: Any) -> None:
        audit(
            tenant=self._tenant_of(obj),
            actor=request.user.get_username(),
            action=f"admin.{obj._meta.model_name}.{verb}",
            target=obj,
            source=models.AuditEvent.Source.ADMIN,
            detail=str(obj)[:500],
            **values,
        )

    def save_model(self, request: HttpRequest, obj: Any, form: Any, change: bool) -> None:
        if change:  # the stored values, before this save replaces them, for log_change
            stored = type(obj)._default_manager.filter(pk=obj.pk).first()
            request._audit_change = (  # type: ignore[attr-defined]
                list(form.changed_data),
                _values(stored, form.changed_data) if stored else {},
            )
        super().save_model(request, obj, form, change)

    def log_addition(self, request: HttpRequest, obj: Any, message: Any) -> Any:
        entry = super().log_addition(request, obj, message)
        names = [f.name for f in obj._meta.concrete_fields]
        self._audit(request, obj, "added", after=_values(obj, names))
        return entry

    def log_change(self, request: HttpRequest, obj: Any, message: Any) -> Any:
        entry = super().log_change(request, obj, message)
        # A change without save_model (a password set by the user admin's own form) names its
        # fields only in the message.
        names, before = getattr(request, "_audit_change", ([], None))
        self._audit(
            request,
            obj,
            "changed",
            before=before,
            after=_values(obj, names) or {"changed": names or str(message)[:500]},
        )
        return entry

    def log_deletions(self, request: HttpRequest, queryset: Any) -> Any:
        objects = list(queryset)  # still there: the admin logs before it deletes
        entries = super().log_deletions(request, queryset)
        for obj in objects:
            names = [f.name for f in obj._meta.concrete_fields]
            self._audit(request, obj, "deleted", before=_values(obj, names))
        return entries


class ReadOnlyAdmin(AuditedAdmin):
    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(models.Tenant)
class TenantAdmin(AuditedAdmin):
    list_display = ("slug", "name", "created_at")
    search_fields = ("slug", "name")


@admin.register(models.ApiToken)
class ApiTokenAdmin(AuditedAdmin):
    list_display = ("name", "prefix", "tenant", "user", "created_at", "revoked_at")
    list_filter = ("tenant",)
    # A token's tenant, owner and scopes are fixed when it is issued: moving a token would hand
    # one tenant's runtime another's data, change who stands behind its requests, or widen what
    # a leaked token may do. Issue a new one instead.
    readonly_fields = (
        "tenant",
        "user",
        "scopes",
        "prefix",
        "token_hash",
        "created_at",
        "revoked_by",
    )

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # tokens are issued by `manage.py issue_token`, which shows them once


@admin.register(models.ServiceAccount)
class ServiceAccountAdmin(ReadOnlyAdmin):
    list_display = ("name", "tenant", "user", "created_at")
    list_filter = ("tenant",)


@admin.register(models.McpServer)
class McpServerAdmin(AuditedAdmin):
    list_display = ("name", "tenant", "trust", "created_at")
    list_filter = ("tenant", "trust")


@admin.register(models.WorkspaceRoot)
class WorkspaceRootAdmin(AuditedAdmin):
    list_display = ("name", "tenant", "path", "created_at")
    list_filter = ("tenant",)


@admin.register(models.Tool)
class ToolAdmin(ReadOnlyAdmin):
    list_display = ("name", "tenant", "kind", "idempotency", "replay_policy", "destructive", "rule")
    list_filter = ("tenant", "kind", "idempotency", "destructive")
    search_fields = ("name",)


@admin.register(models.ApprovalPolicy)
class ApprovalPolicyAdmin(ReadOnlyAdmin):
    # Set on the console's Policies page or through the API, where each change is audited.
    list_display = ("name", "tenant", "tool", "path", "operator", "write_prefix", "created_by")
    list_filter = ("tenant",)


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


@admin.register(models.RolloutPlan)
class RolloutPlanAdmin(ReadOnlyAdmin):
    list_display = ("pk", "tenant", "candidate", "state", "current_step", "created_at")
    list_filter = ("state",)


@admin.register(models.RolloutStep)
class RolloutStepAdmin(ReadOnlyAdmin):
    list_display = ("pk", "plan", "position", "share_bp", "state", "started_at")


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


@admin.register(models.ReconcileBucket)
class ReconcileBucketAdmin(ReadOnlyAdmin):
    list_display = ("bucket_start", "tenant", "outcome", "attempts")
    list_filter = ("tenant", "outcome")


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


@admin.register(models.OnCallPolicy)
class OnCallPolicyAdmin(ReadOnlyAdmin):
    list_display = ("tenant", "first_sla_minutes", "second_sla_minutes", "expiry_warning_minutes")


@admin.register(models.NotificationChannel)
class NotificationChannelAdmin(ReadOnlyAdmin):
    # A webhook URL often carries a token: shown masked here as on the console's On call page.
    list_display = ("tenant", "role", "tier", "kind", "masked_target", "created_at")
    list_filter = ("tenant", "role", "tier", "kind")
    fields = ("tenant", "role", "tier", "kind", "masked_target", "created_at")
    readonly_fields = fields


@admin.register(models.Notification)
class NotificationAdmin(ReadOnlyAdmin):
    list_display = ("created_at", "tenant", "event", "subject_type", "subject_id", "state")
    list_filter = ("tenant", "event", "state")


@admin.register(models.DeclaredCompensation)
class DeclaredCompensationAdmin(ReadOnlyAdmin):
    """Declared through the API or the console's Tools page, where they are audited."""

    list_display = ("tool", "record", "compensating_tool", "declared_by", "updated_at")
    list_filter = ("tenant",)


@admin.register(models.Compensation)
class CompensationAdmin(ReadOnlyAdmin):
    list_display = ("key", "tenant", "tool", "requested_by", "created_at")
    list_filter = ("tenant",)
    search_fields = ("key",)
