"""Who may see which tenant in the console. Roles are Django groups (see ``console.roles``)."""

from __future__ import annotations

from typing import ClassVar

from django.conf import settings
from django.db import models

from ledger.models import Tenant


class Membership(models.Model):
    """A console user's access to one tenant; a user may belong to several."""

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memberships"
    )
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="members")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints: ClassVar = [
            models.UniqueConstraint(fields=["user", "tenant"], name="membership_unique"),
        ]

    def __str__(self) -> str:
        return f"{self.user} @ {self.tenant}"
