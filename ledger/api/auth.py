"""Per-tenant bearer tokens, looked up by their sha256 (one indexed query per request).

A token acts only while its owner may act in its tenant: an active user who is a member there
(a person) or one of the tenant's service accounts. Both are read in the same query as the
token, on every request, so ending a membership, deactivating a user or revoking a token
stops it at the owner's next request. Each operation names the scope it needs
(``ledger.permissions.Scope``); a token has a scope when it names it and, for a person, when
their role in the tenant allows it now.
"""

from __future__ import annotations

import re
from functools import cache

from django.contrib.auth import get_user_model
from django.http import HttpRequest
from ninja.security import HttpBearer

from ledger.calls import Caller
from ledger.errors import Forbidden, InvalidInput
from ledger.models import ApiToken, Membership, ServiceAccount, Tenant
from ledger.permissions import SERVICE_ACCOUNT_SCOPES, Role, Scope, role_scopes
from ledger.sql.statements import column, fetch_joined, select_columns, table

AGENT_HEADER = "HTTP_X_AGENT_ID"
AGENT_ID = re.compile(r"^[A-Za-z0-9_.:@/+-]{1,100}$")


class TokenAuth(HttpBearer):
    """A tenant's bearer token holding ``scope``. Without a scope only a token holding every
    scope passes: an operation that forgets to name its scope is closed, not open
    (``tests/api/test_scope_matrix.py`` holds every operation to naming one)."""

    def __init__(self, scope: Scope | None = None) -> None:
        super().__init__()
        self.scope = scope

    def authenticate(self, request: HttpRequest, token: str) -> Caller | None:
        if not token.startswith(ApiToken.PREFIX) or len(token) > 200:
            return None
        caller = caller_for_token(token, request.META.get(AGENT_HEADER, ""))
        if caller is None:
            return None
        needed = {self.scope} if self.scope is not None else set(Scope)
        if not needed <= caller.scopes:
            missing = ", ".join(sorted(needed - caller.scopes))
            raise Forbidden(f"this token does not hold the scope this operation needs ({missing})")
        return caller


def caller_for_token(token: str, agent_id: str = "") -> Caller | None:
    """The caller a token stands for, or None when it cannot act (unknown, revoked, or its
    owner inactive or no longer the tenant's)."""
    if agent_id and not AGENT_ID.match(agent_id):
        raise InvalidInput("X-Agent-Id must be 1-100 letters, digits or _ . : @ / + -")
    found = fetch_joined(_token_sql(), [ApiToken.hash(token)], (ApiToken, Tenant), trailing=3)
    if found is None:
        return None
    api_token = found.one(ApiToken)
    api_token.tenant = found.one(Tenant)
    role, service_account, superuser = found.values
    if service_account:
        allowed = SERVICE_ACCOUNT_SCOPES
    else:
        roles = {Role(role)} if role else set()
        allowed = role_scopes(roles | ({Role.ADMIN} if superuser else set()))
    return Caller(
        tenant=api_token.tenant,
        token=api_token,
        agent_id=agent_id,
        scopes=frozenset(Scope(name) for name in api_token.scopes) & allowed,
        service_account=bool(service_account),
    )


@cache
def _token_sql() -> str:
    """The unrevoked token with this hash and its tenant, with its owner's role there, whether
    the owner is one of the tenant's service accounts, and whether a superuser; only when the
    owner is active and is a member or a service account of the token's tenant. Written out
    because it runs on every API request (the ORM spent more time compiling it than PostgreSQL
    spent answering; docs/performance.md)."""
    user = get_user_model()
    token_tenant = column(ApiToken, "tenant", "k")
    token_user = column(ApiToken, "user", "k")
    return (
        f"SELECT {select_columns(ApiToken, 'k')}, {select_columns(Tenant, 't')}, "  # noqa: S608
        f"{column(Membership, 'role', 'm')}, {column(ServiceAccount, 'pk', 's')} IS NOT NULL, "
        f"{column(user, 'is_superuser', 'u')} "
        f"FROM {table(ApiToken)} k JOIN {table(Tenant)} t "
        f"ON {column(Tenant, 'pk', 't')} = {token_tenant} "
        f"JOIN {table(user)} u ON {column(user, 'pk', 'u')} = {token_user} "
        f"LEFT JOIN {table(Membership)} m ON {column(Membership, 'user', 'm')} = {token_user} "
        f"AND {column(Membership, 'tenant', 'm')} = {token_tenant} "
        f"LEFT JOIN {table(ServiceAccount)} s ON {column(ServiceAccount, 'user', 's')} = "
        f"{token_user} AND {column(ServiceAccount, 'tenant', 's')} = {token_tenant} "
        f"WHERE {column(ApiToken, 'token_hash', 'k')} = %s "
        f"AND {column(ApiToken, 'revoked_at', 'k')} IS NULL AND {column(user, 'is_active', 'u')} "
        f"AND ({column(Membership, 'pk', 'm')} IS NOT NULL "
        f"OR {column(ServiceAccount, 'pk', 's')} IS NOT NULL)"
    )


def caller_of(request: HttpRequest) -> Caller:
    caller = request.auth  # type: ignore[attr-defined]
    assert isinstance(caller, Caller)
    return caller
