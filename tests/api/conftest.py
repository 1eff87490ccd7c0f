"""An API client holding a tenant's bearer token."""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
import pytest
from django.db import connection
from django.test import Client

from ledger.models import ApiToken, IdempotencyRecord, Tenant
from ledger.permissions import SERVICE_ACCOUNT_SCOPES

#: The steps of a call that name the input they run (``ledger.calls.same_input``).
_RUNS_ITS_INPUT = re.compile(r"^/calls/(?P<call>[0-9a-f-]+)/(replay|start)$")


class ApiClient:
    """The API as a runtime uses it. A replay or a start sends the call's own input, as a
    runtime does, unless the body names one (the tests of that rule send another)."""

    def __init__(self, tenant: Tenant, token: str | None) -> None:
        self.tenant = tenant
        self.token = token
        self.client = Client()
        self.inputs: dict[str, Any] = {}

    def _headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"} if self.token else {}

    def post(self, path: str, body: Any = None, *, raw: str | bytes | None = None) -> Any:
        runs = _RUNS_ITS_INPUT.match(path)
        if raw is None and runs and runs["call"] in self.inputs:
            body = {"input": self.inputs[runs["call"]], **(body or {})}
        data = raw if raw is not None else json.dumps(body if body is not None else {})
        response = self.client.post(
            f"/api/v1{path}",
            data=data,
            content_type="application/json",
            headers=self._headers(),
            secure=True,
        )
        if (path == "/calls" or runs) and isinstance(body, dict):
            # A call's answer, or a replay's (a new call of the same action): its input.
            answer = response.json() if response.content else None
            if isinstance(answer, dict) and "call_id" in answer:
                self.inputs[answer["call_id"]] = body.get("input", {})
        return response

    def get(self, path: str, **params: Any) -> Any:
        return self.client.get(f"/api/v1{path}", params, headers=self._headers(), secure=True)

    def start_run(self, run_id: str = "run-1", user_id: str = "u1") -> dict[str, Any]:
        response = self.post("/runs", {"run_id": run_id, "user_id": user_id})
        assert response.status_code in (200, 201), response.content
        return response.json()

    def call(self, tool: str, input: dict[str, Any], **extra: Any) -> Any:
        body = {"run_id": "run-1", "step_id": "step-1", "tool": tool, "input": input, **extra}
        return self.post("/calls", body)


def client_for(tenant: Tenant, scopes: Iterable[str] = SERVICE_ACCOUNT_SCOPES) -> ApiClient:
    """A client holding a service account's token with ``scopes``: by default every scope a
    service account may hold, so one client drives a runtime's calls and a manager's changes
    alike (``tests/api/test_scope_matrix.py`` checks each scope on its own)."""
    _token, plaintext = ApiToken.issue(tenant=tenant, name="runtime", scopes=sorted(scopes))
    return ApiClient(tenant, plaintext)


@contextmanager
def locked_elsewhere(record: IdempotencyRecord) -> Iterator[None]:
    """While the block runs, another connection holds ``record``'s row ``FOR UPDATE``, as a
    request stuck inside its transaction would."""
    db = connection.settings_dict
    held, release = threading.Event(), threading.Event()

    def hold_lock() -> None:
        with (
            psycopg.connect(
                host=db["HOST"], port=db["PORT"] or None, user=db["USER"], dbname=db["NAME"]
            ) as other,
            other.transaction(),
        ):
            other.execute(
                "SELECT 1 FROM ledger_idempotencyrecord WHERE id = %s FOR UPDATE", [record.pk]
            )
            held.set()
            release.wait(30)

    locker = threading.Thread(target=hold_lock)
    locker.start()
    try:
        assert held.wait(10)
        yield
    finally:
        release.set()
        locker.join(10)


@pytest.fixture
def api(tenant: Tenant) -> ApiClient:
    return client_for(tenant)


@pytest.fixture
def other_api(other_tenant: Tenant) -> ApiClient:
    return client_for(other_tenant)
