"""Per-tenant bearer tokens, looked up by their sha256 (one indexed query per request)."""

from __future__ import annotations

import re
from functools import cache

from django.contrib.auth import get_user_model
from django.http import HttpRequest
from ninja.security import HttpBearer

from ledger.calls import Caller
from ledger.errors import InvalidInput
from ledger.models import ApiToken, Tenant
from ledger.services.statements import column, fetch_joined, select_columns, table

AGENT_HEADER = "HTTP_X_AGENT_ID"
AGENT_ID = re.compile(r"^[A-Za-z0-9_.:@/+-]{1,100}$")


class TokenAuth(HttpBearer):
    def authenticate(self, request: HttpRequest, token: str) -> Caller | None:
        if not token.startswith(ApiToken.PREFIX) or len(token) > 200:
            return None
        api_token = _token_with_tenant(ApiToken.hash(token))
        if api_token is None:
            return None
        agent_id = request.META.get(AGENT_HEADER, "")
        if agent_id and not AGENT_ID.match(agent_id):
            raise InvalidInput("X-Agent-Id must be 1-100 letters, digits or _ . : @ / + -")
        return Caller(tenant=api_token.tenant, token=api_token, agent_id=agent_id)


def _token_with_tenant(token_hash: str) -> ApiToken | None:
    """The unrevoked token with this hash, whose owner is an active user, and its tenant:
    deactivating a user (a person who left, a retired service account) stops every token they
    own at once. One indexed query, written out
    because it runs on every API request (the ORM spent more time compiling it than
    PostgreSQL spent answering; docs/performance.md)."""
    found = fetch_joined(_token_sql(), [token_hash], (ApiToken, Tenant))
    if found is None:
        return None
    api_token = found.one(ApiToken)
    api_token.tenant = found.one(Tenant)
    return api_token


@cache
def _token_sql() -> str:
    user = get_user_model()
    return (
        f"SELECT {select_columns(ApiToken, 'k')}, {select_columns(Tenant, 't')} "  # noqa: S608
        f"FROM {table(ApiToken)} k JOIN {table(Tenant)} t "
        f"ON {column(Tenant, 'pk', 't')} = {column(ApiToken, 'tenant', 'k')} "
        f"JOIN {table(user)} u ON {column(user, 'pk', 'u')} = {column(ApiToken, 'user', 'k')} "
        f"WHERE {column(ApiToken, 'token_hash', 'k')} = %s "
        f"AND {column(ApiToken, 'revoked_at', 'k')} IS NULL AND {column(user, 'is_active', 'u')}"
    )


def caller_of(request: HttpRequest) -> Caller:
    caller = request.auth  # type: ignore[attr-defined]
    assert isinstance(caller, Caller)
    return caller
