"""A console user's memberships: which tenants they belong to and their roles in each."""

from __future__ import annotations

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest
from django.utils.translation import gettext as _

from console.models import Membership
from console.roles import Role, allows
from ledger.models import Tenant


def user_id_of(request: HttpRequest) -> int:
    user_id = request.user.pk
    if not isinstance(user_id, int):
        raise PermissionDenied(_("Sign in first."))
    return user_id


def roles_of(user: AbstractBaseUser | AnonymousUser, tenant: Tenant | int) -> set[Role]:
    """The user's roles in ``tenant``: their membership's role, none without one. A superuser
    is an admin wherever they are a member."""
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
    return bool(roles) and allows(roles, allowed)


def tenants_of(request: HttpRequest) -> list[Tenant]:
    return list(Tenant.objects.filter(members__user_id=user_id_of(request)).order_by("slug"))
