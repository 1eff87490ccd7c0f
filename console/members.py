"""A console user's memberships: which tenants they belong to and their roles in each."""

from __future__ import annotations

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils.translation import gettext as _

from ledger.models import Membership, Tenant
from ledger.permissions import Role, allows


def user_id_of(request: HttpRequest) -> int:
    user_id = request.user.pk
    if not isinstance(user_id, int):
        raise PermissionDenied(_("Sign in first."))
    return user_id


def _roles(user: AbstractBaseUser | AnonymousUser, role: str | None) -> set[Role]:
    """What a membership with ``role`` (None: no membership) gives ``user``: that role, and
    admin for a superuser wherever they are a member."""
    if role is None:
        return set()
    roles = {Role(role)} if role else set()
    if getattr(user, "is_superuser", False):
        roles.add(Role.ADMIN)
    return roles


#: Where a request keeps its user's memberships once read (``memberships_of``).
_MEMBERSHIPS = "_console_memberships"


def memberships_of(request: HttpRequest) -> list[Membership]:
    """The signed-in user's memberships with their tenants, by tenant slug, read once a request:
    the tenant chosen, the role checks and the tenant switcher of every page all read them."""
    cached: list[Membership] | None = getattr(request, _MEMBERSHIPS, None)
    if cached is None:
        cached = list(
            Membership.objects.filter(user_id=user_id_of(request))
            .select_related("tenant")
            .order_by("tenant__slug")
        )
        setattr(request, _MEMBERSHIPS, cached)
    return cached


def request_roles(request: HttpRequest, tenant: Tenant) -> set[Role]:
    """The signed-in user's roles in ``tenant``, from the request's memberships."""
    membership = next((m for m in memberships_of(request) if m.tenant_id == tenant.pk), None)
    return _roles(request.user, membership.role if membership else None)


def request_has_role(request: HttpRequest, tenant: Tenant, *allowed: Role) -> bool:
    """Whether the signed-in user holds one of ``allowed`` (any role: none given) in ``tenant``."""
    roles = request_roles(request, tenant)
    return bool(roles) and allows(roles, allowed)


def tenants_of(request: HttpRequest) -> list[Tenant]:
    return [membership.tenant for membership in memberships_of(request)]


def administered_tenants(request: HttpRequest) -> QuerySet[Tenant]:
    """The tenants the signed-in user administers: those where they are a member with the admin
    role, every tenant for a superuser (the installation's admin). They manage these tenants'
    members in /admin/ and read their series at /metrics."""
    if getattr(request.user, "is_superuser", False):
        return Tenant.objects.all()
    return Tenant.objects.filter(members__user=request.user.pk or 0, members__role=Role.ADMIN)
