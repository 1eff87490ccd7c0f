"""Per-tenant bearer tokens, looked up by their sha256 (one indexed query per request)."""

from __future__ import annotations

import re

from django.http import HttpRequest
from ninja.security import HttpBearer

from ledger.errors import InvalidInput
from ledger.models import ApiToken
from ledger.services.calls import Caller

AGENT_HEADER = "HTTP_X_AGENT_ID"
AGENT_ID = re.compile(r"^[A-Za-z0-9_.:@/+-]{1,100}$")


class TokenAuth(HttpBearer):
    def authenticate(self, request: HttpRequest, token: str) -> Caller | None:
        if not token.startswith(ApiToken.PREFIX) or len(token) > 200:
            return None
        try:  # token_hash is unique: no ORDER BY needed (``first()`` would add one)
            api_token = ApiToken.objects.select_related("tenant").get(
                token_hash=ApiToken.hash(token), revoked_at__isnull=True
            )
        except ApiToken.DoesNotExist:
            return None
        agent_id = request.META.get(AGENT_HEADER, "")
        if agent_id and not AGENT_ID.match(agent_id):
            raise InvalidInput("X-Agent-Id must be 1-100 letters, digits or _ . : @ / + -")
        return Caller(tenant=api_token.tenant, token=api_token, agent_id=agent_id)


def caller_of(request: HttpRequest) -> Caller:
    caller = request.auth  # type: ignore[attr-defined]
    assert isinstance(caller, Caller)
    return caller
