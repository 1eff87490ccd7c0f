"""A live ledger server (Django's threaded live server) and a client for one tenant."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from agent_ledger_client import LedgerClient
from ledger.models import ApiToken, Tenant


@pytest.fixture
def ledger_token(transactional_db) -> str:
    tenant = Tenant.objects.create(slug="acme", name="Acme")
    _token, plaintext = ApiToken.issue(tenant=tenant, name="runtime")
    return plaintext


@pytest.fixture
def client(live_server, ledger_token: str) -> Iterator[LedgerClient]:
    with LedgerClient(
        live_server.url, ledger_token, agent_id="test-agent", request_timeout=10
    ) as ledger:
        yield ledger
