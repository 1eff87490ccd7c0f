"""API tokens issued and revoked, each audited in the tenant's log (DESIGN section 10).

A token's plaintext is shown once, when it is issued, and never stored. Revoking is final: a
revoked token is refused at its next request (``ledger.api.auth``)."""

from __future__ import annotations

from dataclasses import dataclass

from django.db import transaction
from django.db.models import QuerySet
from django.db.models.functions import Now

from ledger.errors import Conflict, InvalidInput, NotFound
from ledger.models import ApiToken, Membership, ServiceAccount, Tenant
from ledger.permissions import Role, role_scopes
from ledger.services.audit import audit


@dataclass(frozen=True)
class TokenRow:
    """A token as its tenant's admins see it: who owns it and what it may do now."""

    token: ApiToken
    owner: str
    service_account: bool
    role: str
    effective_scopes: list[str]


def tenant_tokens(tenant: Tenant) -> list[TokenRow]:
    """The tenant's tokens, newest first, with what each may do now: a person's scopes are
    bounded by their role in the tenant (none once their membership ended)."""
    tokens = list(
        ApiToken.objects.filter(tenant=tenant).select_related("user").order_by("-created_at", "-pk")
    )
    accounts = set(ServiceAccount.objects.filter(tenant=tenant).values_list("user_id", flat=True))
    roles = dict(Membership.objects.filter(tenant=tenant).values_list("user_id", "role"))
    rows = []
    for token in tokens:
        service_account = token.user_id in accounts
        if service_account:
            allowed = set(token.scopes)
        elif token.user_id in roles:
            role = roles[token.user_id]
            held = role_scopes({Role(role)} if role else set())
            allowed = set(token.scopes) & set(held)
        else:
            allowed = set()
        if token.revoked_at is not None or not token.user.is_active:
            allowed = set()
        rows.append(
            TokenRow(
                token=token,
                owner=token.user.get_username(),
                service_account=service_account,
                role=roles.get(token.user_id, ""),
                effective_scopes=sorted(allowed),
            )
        )
    return rows


def _token_of(tenant: Tenant, token_id: int) -> QuerySet[ApiToken]:
    return ApiToken.objects.filter(tenant=tenant, pk=token_id)


def revoke_token(
    *, tenant: Tenant, token_id: int, actor: str, source: str, reason: str
) -> ApiToken:
    """Revoke one of the tenant's tokens, audited; a token already revoked is a conflict."""
    if not reason.strip():
        raise InvalidInput("say why the token is revoked")
    with transaction.atomic():
        token = _token_of(tenant, token_id).select_for_update().first()
        if token is None:
            raise NotFound("no such token")
        if token.revoked_at is not None:
            raise Conflict(f"the token {token.name} is already revoked")
        _token_of(tenant, token_id).update(revoked_at=Now(), revoked_by=actor)
        token.refresh_from_db(fields=["revoked_at", "revoked_by"])
        audit(
            tenant=tenant,
            actor=actor,
            action="token.revoked",
            target=token,
            source=source,
            before={"revoked": False},
            after={"revoked": True, "name": token.name, "prefix": token.prefix},
            detail=reason.strip(),
        )
    return token
