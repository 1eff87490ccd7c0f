"""Console roles: a user's role is that of their membership in the tenant they are working in
(``console.models.Membership.role``), so an approver in one tenant is nobody special in another.
A view names the roles that may use it; admins may use all (``console.access``)."""

from __future__ import annotations

from django.db import models


class Role(models.TextChoices):
    OPERATOR = "operator"
    APPROVER = "approver"
    MANAGER = "manager"
    ADMIN = "admin"


def allows(roles: set[Role], allowed: tuple[Role, ...]) -> bool:
    """Whether a user holding ``roles`` may use a view open to ``allowed`` (none: any member)."""
    return not allowed or Role.ADMIN in roles or bool(roles & set(allowed))
