"""Console roles: a user's role is that of their membership in the tenant they are working in
(``console.models.Membership.role``), so an approver in one tenant is nobody special in another.
A view names the roles that may use it; admins may use all."""

from __future__ import annotations

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.db import models

from ledger.models import Tenant


class Role(models.TextChoices):
    OPERATOR = "operator"
    APPROVER = "approver"
    MANAGER = "manager"
    ADMIN = "admin"


def roles_of(user: AbstractBaseUser | AnonymousUser, tenant: Tenant | int) -> set[Role]:
    """The user's roles in ``tenant``: their membership's role, none without one. A superuser
    is an admin wherever they are a member."""
    from console.models import Membership

    if not user.is_authenticated:
        return set()
    tenant_id = tenant.pk if isinstance(tenant, Tenant) else tenant
    role = (
        Membership.objects.filter(user_id=user.pk, tenant_id=tenant_id)
        .values_list("role", flat=True)
        .first()
    )
    if role is None:
        return set()
    roles = {Role(role)} if role else set()
    if getattr(user, "is_superuser", False):
        roles.add(Role.ADMIN)
    return roles


def has_role(user: AbstractBaseUser | AnonymousUser, tenant: Tenant | int, *allowed: Role) -> bool:
    roles = roles_of(user, tenant)
    return Role.ADMIN in roles or bool(roles & set(allowed))
