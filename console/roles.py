"""Console roles: Django groups. A view names the roles that may use it; admins may use all."""

from __future__ import annotations

from enum import StrEnum

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser, Group


class Role(StrEnum):
    OPERATOR = "operator"
    APPROVER = "approver"
    MANAGER = "manager"
    ADMIN = "admin"


def roles_of(user: AbstractBaseUser | AnonymousUser) -> set[Role]:
    if not user.is_authenticated:
        return set()
    names = set(Group.objects.filter(user=user.pk).values_list("name", flat=True))
    roles = {role for role in Role if role.value in names}
    if getattr(user, "is_superuser", False):
        roles.add(Role.ADMIN)
    return roles


def has_role(user: AbstractBaseUser | AnonymousUser, *allowed: Role) -> bool:
    roles = roles_of(user)
    return Role.ADMIN in roles or bool(roles & set(allowed))
