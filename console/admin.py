"""Memberships in /admin/: a tenant's admins manage who belongs to it and with which role.

A staff user who is an admin of some tenants sees and edits only those tenants' memberships; a
superuser sees all. Every change is audited (``ledger.admin.AuditedAdmin``).

The security log (``SecurityEvent``) is read here by superusers alone, and changed by nobody.
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest

from console.members import administered_tenants
from console.models import SecurityEvent
from ledger.admin import AuditedAdmin, ReadOnlyAdmin
from ledger.models import Membership


@admin.register(Membership)
class MembershipAdmin(AuditedAdmin):
    list_display = ("user", "tenant", "role", "created_at")
    list_filter = ("role", "tenant")
    search_fields = ("user__username", "tenant__slug")
    raw_id_fields = ("user",)

    def get_queryset(self, request: HttpRequest) -> QuerySet[Membership]:
        queryset = super().get_queryset(request).select_related("user", "tenant")
        return queryset.filter(tenant__in=administered_tenants(request))

    def formfield_for_foreignkey(self, db_field: Any, request: HttpRequest, **kwargs: Any) -> Any:
        if db_field.name == "tenant":
            kwargs["queryset"] = administered_tenants(request)
        return super().formfield_for_foreignkey(db_field, request, **kwargs)

    def _is_tenant_admin(self, request: HttpRequest, obj: Membership | None = None) -> bool:
        tenants = administered_tenants(request)
        if obj is not None:
            return tenants.filter(pk=obj.tenant_id).exists()
        return tenants.exists()

    def has_module_permission(self, request: HttpRequest) -> bool:
        return self._is_tenant_admin(request)

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return self._is_tenant_admin(request, obj)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return self._is_tenant_admin(request)

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return self._is_tenant_admin(request, obj)

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return self._is_tenant_admin(request, obj)


@admin.register(SecurityEvent)
class SecurityEventAdmin(ReadOnlyAdmin):
    """The installation's security log: superusers only, whatever permissions a staff user holds
    (a tenant admin with staff status must not read other tenants' probes, nor who probed)."""

    list_display = (
        "created_at",
        "actor",
        "action",
        "reason",
        "target_type",
        "target_id",
        "tenant",
        "source",
    )
    list_filter = ("reason", "source", "action")
    search_fields = ("actor", "target_id", "detail")
    date_hierarchy = "created_at"

    def has_module_permission(self, request: HttpRequest) -> bool:
        return bool(getattr(request.user, "is_superuser", False))

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return bool(getattr(request.user, "is_superuser", False))
