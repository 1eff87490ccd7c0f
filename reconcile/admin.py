"""Admin pages for the reconciliation configuration and the attempts log (read-only)."""

from __future__ import annotations

import re

from django.contrib import admin

from ledger.admin import ReadOnlyAdmin
from reconcile import models

_SECRET_QUERY_VALUE = re.compile(
    r"([?&][^=&#]*(?:token|secret|api[-_]?key|pass|auth|signature)[^=&#]*=)[^&#]*", re.I
)


class _MaskedUrlAdmin(admin.ModelAdmin):
    @admin.display(description="URL template")
    def url(self, adapter: models.DownstreamAdapter | models.CompensationAdapter) -> str:
        """The template with secret-looking query values masked: lists get seen over shoulders
        and in screenshots; the change form still shows the whole template."""
        return _SECRET_QUERY_VALUE.sub(r"\1***", adapter.url_template)


@admin.register(models.DownstreamAdapter)
class DownstreamAdapterAdmin(_MaskedUrlAdmin):
    list_display = ("tool", "tenant", "kind", "url", "grace_seconds", "max_attempts")
    list_filter = ("tenant", "kind")


@admin.register(models.ReconcileAttempt)
class ReconcileAttemptAdmin(ReadOnlyAdmin):
    list_display = ("created_at", "record", "attempt", "kind", "outcome", "worker")
    list_filter = ("tenant", "kind", "outcome")


@admin.register(models.CompensationAdapter)
class CompensationAdapterAdmin(_MaskedUrlAdmin):
    list_display = ("tool", "tenant", "url", "timeout_seconds")
    list_filter = ("tenant",)
