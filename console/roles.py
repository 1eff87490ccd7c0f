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
