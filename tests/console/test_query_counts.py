"""Every console page costs a bounded number of queries, whatever the number of rows shown."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from ledger.models import AuditEvent, Tenant
from ledger.services import combinations, metrics
from tests.api.conftest import client_for
from tests.console.conftest import make_pending, make_user, signed_in
from tests.factories import make_tool

pytestmark = pytest.mark.django_db

MAX_QUERIES = 12  # session, user, roles, tenant, the page's own reads, messages


def _approvals(tenant: Tenant, start: int, n: int) -> None:
    for i in range(start, start + n):
        make_pending(tenant, f"f{i}.py", run_id=f"run-a{i}")


def _unknown(tenant: Tenant, start: int, n: int) -> None:
    api = client_for(tenant)
    api.start_run("run-u")
    for i in range(start, start + n):
        call = api.call("create_order", {"cart": i}, business_object_id=f"c{i}", run_id="run-u")
        api.post(
            f"/calls/{call.json()['call_id']}/complete",
            {"fencing_token": 1, "outcome": "uncertain"},
        )


def _audit(tenant: Tenant, start: int, n: int) -> None:
    AuditEvent.objects.bulk_create(
        AuditEvent(
            tenant=tenant,
            actor="x",
            action="test.event",
            target_type="t",
            target_id=str(i),
            source="system",
        )
        for i in range(start, start + n)
    )


def _tools(tenant: Tenant, start: int, n: int) -> None:
    for i in range(start, start + n):
        make_tool(tenant, f"tool_{i}")


def _combinations(tenant: Tenant, start: int, n: int) -> None:
    versions = {"model": "m", "rules": "r", "tool_schema": "t", "data_version": "d"}
    for i in range(start, start + n):
        combo, _ = combinations.create_combination(
            tenant=tenant, label=f"c{i}", actor="x", source="api", prompt=f"p{i}", **versions
        )
        combinations.activate(tenant=tenant, combination_id=combo.pk, actor="x", source="api")
        api = client_for(tenant)
        api.start_run(f"run-c{i}")
        api.call("read_file", {"i": i}, run_id=f"run-c{i}")
    metrics.roll_up()


PAGES: list[tuple[str, Callable[[Tenant, int, int], None]]] = [
    ("/", _approvals),
    ("/approvals/", _approvals),
    ("/unknown/", _unknown),
    ("/audit/", _audit),
    ("/tools/", _tools),
    ("/combinations/", _combinations),
    ("/metrics/", _combinations),
    ("/ledger/", _unknown),
    ("/ledger/runs/", _combinations),
]


@pytest.mark.parametrize(("path", "grow"), PAGES, ids=[p for p, _ in PAGES])
def test_query_count_does_not_grow_with_rows(django_user_model, tenant, path, grow) -> None:
    client = signed_in(make_user(django_user_model, "root", tenant, "admin"))
    counts = []
    for start, n in ((0, 2), (2, 6)):
        grow(tenant, start, n)
        with CaptureQueriesContext(connection) as queries:
            response = client.get(path, secure=True)
        assert response.status_code == 200
        counts.append(len(queries))
    assert counts[0] == counts[1] <= MAX_QUERIES, [q["sql"] for q in queries.captured_queries]
