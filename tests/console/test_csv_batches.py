"""A CSV export reads its rows in keyset batches, each a query of its own, never through a
server-side cursor (which a pooler in transaction mode cannot carry): every row once, in the
list's order, whatever the ordering's directions, ties and NULLs. The `scale` test
``tests/console/test_exports_behind_pgbouncer.py`` exports through PgBouncer under load."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from console import csv_export
from ledger.models import McpServer, Tool
from tests.factories import make_tool

pytestmark = pytest.mark.django_db


@pytest.fixture
def tools(tenant) -> None:
    servers = [
        McpServer.objects.create(tenant=tenant, name=f"s{n}", trust="untrusted") for n in range(2)
    ]
    for n in range(11):
        tool = make_tool(tenant, f"tool-{n % 4}-{n}")
        server = servers[n % 2] if n % 3 else None
        Tool.objects.filter(pk=tool.pk).update(
            server=server, kind="mcp" if server else "custom", destructive=bool(n % 2)
        )


@pytest.mark.parametrize(
    "ordering",
    [("-server_id", "destructive", "name"), ("server_id", "-destructive"), ("-pk",), ()],
)
def test_batches_read_every_row_once_in_the_lists_order(
    tenant, tools, monkeypatch, ordering
) -> None:
    monkeypatch.setattr(csv_export, "CHUNK", 2)
    rows = Tool.objects.filter(tenant=tenant).order_by(*ordering)
    expected = [tool.pk for tool in rows.order_by(*ordering, "pk")]
    with CaptureQueriesContext(connection) as queries:
        read = [tool.pk for tool in csv_export.in_chunks(rows)]
    assert read == expected and len(expected) == 11
    assert len(queries) == 6  # five full batches and the short one
    assert all(q["sql"].lstrip().upper().startswith("SELECT") for q in queries.captured_queries)


def test_an_export_reads_one_row_past_its_cap(tenant, tools, monkeypatch) -> None:
    monkeypatch.setattr(csv_export, "CHUNK", 3)
    monkeypatch.setattr(csv_export, "MAX_EXPORT_ROWS", 4)
    read = list(csv_export.in_chunks(Tool.objects.filter(tenant=tenant).order_by("name")))
    assert len(read) == 5  # the cap and one more, which says the export was cut
