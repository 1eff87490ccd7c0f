"""Admin pages for the reconciliation configuration and the attempts log (read-only)."""

from __future__ import annotations

from django.contrib import admin

from ledger.admin import ReadOnlyAdmin
from reconcile import models


@admin.register(models.WorkspaceRoot)
class WorkspaceRootAdmin(admin.ModelAdmin):
    list_display = ("name", "tenant", "path", "created_at")
    list_filter = ("tenant",)


@admin.register(models.DownstreamAdapter)
class DownstreamAdapterAdmin(admin.ModelAdmin):
    list_display = ("tool", "tenant", "kind", "url_template", "grace_seconds", "max_attempts")
    list_filter = ("tenant", "kind")


@admin.register(models.ReconcileAttempt)
class ReconcileAttemptAdmin(ReadOnlyAdmin):
    list_display = ("created_at", "record", "attempt", "kind", "outcome", "worker")
    list_filter = ("tenant", "kind", "outcome")
