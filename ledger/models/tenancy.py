"""Tenants and who acts for them: members (people, with a role each), service accounts and
API tokens."""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Iterable
from typing import ClassVar

from django.conf import settings
from django.contrib.postgres.fields import ArrayField
from django.db import models
from django.db.models import Q

from ledger.models.constraints import SHA256_HEX
from ledger.permissions import (
    PERSON_TOKEN_SCOPES,
    RUNTIME_SCOPES,
    Role,
    Scope,
    token_scopes_problem,
)


class Tenant(models.Model):
    slug = models.SlugField(max_length=64, unique=True)
    name = models.CharField(max_length=200)
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return self.slug


class Membership(models.Model):
    """A person's access to one tenant, with their role there (``ledger.permissions``); a user
    may belong to several tenants with a different role in each. No role: a member who may run
    agents through the API and read the console's inbox, tools and audit. The membership is
    what lets their API tokens act: ended, their tokens stop at once (``ledger.api.auth``)."""

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memberships"
    )
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="members")
    role = models.CharField(max_length=16, choices=Role.choices, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints: ClassVar = [
            models.UniqueConstraint(fields=["user", "tenant"], name="membership_unique"),
            models.CheckConstraint(
                condition=models.Q(role__in=["", *Role.values]), name="membership_role"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.user} @ {self.tenant} ({self.role or 'no role'})"


class ServiceAccount(models.Model):
    """A user that stands for a runtime, not a person: it owns API tokens, has no password, and
    can never decide an approval (its requests need a human approver)."""

    user = models.OneToOneField(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="service_account"
    )
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="service_accounts")
    name = models.CharField(max_length=100)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints: ClassVar = [
            models.UniqueConstraint(fields=["tenant", "name"], name="serviceaccount_unique_name"),
        ]

    def __str__(self) -> str:
        return f"{self.name} @ {self.tenant_id}"

    @staticmethod
    def username_for(tenant: Tenant, name: str) -> str:
        # "/" is in no tenant slug, so two tenants' accounts never share a user name.
        return f"{tenant.slug}/{name}"

    @classmethod
    def named(cls, *, tenant: Tenant, name: str) -> ServiceAccount:
        """The tenant's service account of this name, created (with its user) if missing."""
        from django.contrib.auth import get_user_model

        existing = cls.objects.filter(tenant=tenant, name=name).select_related("user").first()
        if existing is not None:
            return existing
        username = cls.username_for(tenant, name)
        user_model = get_user_model()
        if len(username) > user_model._meta.get_field("username").max_length:  # type: ignore[operator]
            raise ValueError(f"the service account name {name!r} is too long")
        user = user_model.objects.create_user(username=username, password=None)
        return cls.objects.create(user=user, tenant=tenant, name=name)


class ApiToken(models.Model):
    """A per-tenant bearer token owned by a user: a member of the tenant, or one of its service
    accounts. Only its sha256 is stored; the prefix helps humans find it. ``scopes`` bound what
    it may do: a person's token never does more than its owner's role allows now, a service
    account's exactly what it names (``ledger.permissions``)."""

    PREFIX = "al_"

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="api_tokens")
    # Who stands behind every request made with it: that user can never approve them.
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="api_tokens"
    )
    name = models.CharField(max_length=100)
    prefix = models.CharField(max_length=16)
    token_hash = models.CharField(max_length=64, unique=True)
    scopes = ArrayField(models.CharField(max_length=32, choices=Scope.choices), default=list)
    created_at = models.DateTimeField(auto_now_add=True)
    revoked_at = models.DateTimeField(null=True, blank=True)
    revoked_by = models.CharField(max_length=200, blank=True)

    class Meta:
        constraints: ClassVar = [
            models.CheckConstraint(
                condition=Q(token_hash__regex=SHA256_HEX), name="apitoken_hash_is_sha256"
            ),
            models.CheckConstraint(
                condition=Q(scopes__contained_by=Scope.values), name="apitoken_known_scopes"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.name} ({self.prefix}…)"

    @staticmethod
    def hash(plaintext: str) -> str:
        # Tokens are 256-bit random strings, so a fast hash is enough (no dictionary to attack).
        return hashlib.sha256(plaintext.encode()).hexdigest()

    @classmethod
    def issue(
        cls,
        *,
        tenant: Tenant,
        name: str,
        user: models.Model | None = None,
        scopes: Iterable[str] | None = None,
    ) -> tuple[ApiToken, str]:
        """Create a token owned by ``user``, or by the tenant's service account named after the
        token; the plaintext is returned once and never stored. ``scopes`` default to what its
        owner's role allows (a person) or to running agents (a service account); ``ValueError``
        names a scope the token may not have."""
        if user is None:
            user = ServiceAccount.named(tenant=tenant, name=name).user
        service_account = ServiceAccount.objects.filter(user_id=user.pk).exists()
        names = sorted(
            set(RUNTIME_SCOPES if service_account else PERSON_TOKEN_SCOPES)
            if scopes is None
            else {str(scope) for scope in scopes}
        )
        problem = token_scopes_problem(names, service_account=service_account)
        if problem is not None:
            raise ValueError(problem)
        plaintext = cls.PREFIX + secrets.token_urlsafe(32)
        token = cls.objects.create(
            tenant=tenant,
            user=user,
            name=name,
            prefix=plaintext[:10],
            token_hash=cls.hash(plaintext),
            scopes=names,
        )
        return token, plaintext
