"""Every console list exports as CSV exactly the rows its filters match: all of them, across
its pages, in its order, with the page's columns; streamed; for the roles and the tenant the
page is for; with cells a spreadsheet would run quoted, and a cut export saying so."""

from __future__ import annotations

import csv
import io
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from django.db import connection, transaction
from django.http import StreamingHttpResponse
from django.test import Client
from django.test.utils import CaptureQueriesContext
from hypothesis import given
from hypothesis import strategies as st

from console import csv_export
from ledger import combinations
from ledger.domain import EscalationKind
from ledger.models import AuditEvent, IdempotencyRecord, Tenant
from ledger.records.escalation import escalate
from ledger.services.audit import audit
from tests.api.conftest import client_for
from tests.console.conftest import make_pending, make_user, signed_in

pytestmark = pytest.mark.django_db

VERSIONS = {"model": "m", "prompt": "p", "rules": "r", "tool_schema": "t"}


def _fill(tenant: Tenant, runs: int) -> None:
    """Calls, runs, unknown calls (one escalated), approvals, audit events, tools and
    combinations of ``tenant``, enough for more than one page of the paged lists."""
    for n in range(2):
        combo, _ = combinations.create_combination(
            tenant=tenant, label=f"{tenant.slug}-c{n}", actor="x", source="api",
            data_version=str(n), **VERSIONS,
        )  # fmt: skip
        combinations.activate(tenant=tenant, combination_id=combo.pk, actor="x", source="api")
    api = client_for(tenant)
    for r in range(runs):
        api.start_run(f"run-{r}")
        for cart in range(3):
            call = api.call(
                "create_order", {"cart": cart}, run_id=f"run-{r}", step_id=f"s{cart}",
                business_object_id=f"{tenant.slug}-{r}-{cart}",
            ).json()  # fmt: skip
            api.post(
                f"/calls/{call['call_id']}/complete", {"fencing_token": 1, "outcome": "uncertain"}
            )
    api.call("read_file", {"path": "a"}, run_id="run-0", step_id="read")
    record = IdempotencyRecord.objects.filter(tenant=tenant).first()
    assert record is not None
    escalate(record, EscalationKind.NO_CHECK, "no adapter", actor="worker", source="system")
    for n in range(3):
        make_pending(tenant, f"file-{n}.py", f"review-{n}", api=api)
    for n in range(60):
        audit(tenant=tenant, actor="x", action=f"test.noted.{n}", target=record, source="api")


@pytest.fixture(autouse=True)
def _short_unknown_pages(monkeypatch) -> None:
    """The unknown queue's pages are 100 calls; shorter ones here, so it has several."""
    monkeypatch.setattr("console.unknown.PAGE", 25)


@pytest.fixture(scope="module")
def _filled(django_db_setup, django_db_blocker) -> Iterator[None]:
    """The two tenants' rows, made once for the module's tests (as Django's ``setUpTestData``):
    in a transaction rolled back after them, each test running in a savepoint inside it."""
    with django_db_blocker.unblock(), transaction.atomic():
        _fill(Tenant.objects.create(slug="ours", name="Ours"), runs=20)
        _fill(Tenant.objects.create(slug="theirs", name="Theirs"), runs=2)
        yield
        transaction.set_rollback(True)


@pytest.fixture
def tenants(_filled) -> tuple[Tenant, Tenant]:
    return Tenant.objects.get(slug="ours"), Tenant.objects.get(slug="theirs")


@pytest.fixture
def admin(django_user_model, tenants) -> Client:
    return signed_in(make_user(django_user_model, "root", tenants[0], "admin"))


def _rows(response: Any) -> list[dict[str, str]]:
    assert isinstance(response, StreamingHttpResponse)
    assert response["Content-Type"].startswith("text/csv")
    assert "attachment" in response["Content-Disposition"]
    return list(csv.DictReader(io.StringIO(b"".join(response.streaming_content).decode())))


#: Each list: its path, a filter, the ids of a page's rows (from the page's context), the
#: cursor of its next page, and the CSV column with the same ids.
LISTS: dict[str, tuple[str, dict[str, str], Callable[[Any], list[str]], str, str]] = {
    "calls": (
        "/ledger/", {"tool": "create", "range": "24h"},
        lambda c: [str(e.call_id) for e in c["rows"]], "before", "call_id",
    ),
    "runs": (
        "/ledger/runs/", {"run": "run-1"}, lambda c: [r.run_id for r in c["rows"]], "before",
        "run_id",
    ),
    "unknown": (
        "/unknown/", {"tool": "create"}, lambda c: [str(r.pk) for r in c["records"]],
        "after", "record_id",
    ),
    "approvals": (
        "/approvals/", {"tool": "write", "range": "1h", "order": "newest"},
        lambda c: [str(a.pk) for a, *_ in c["approvals"]], "", "approval_id",
    ),
    "audit": (
        "/audit/", {"action": "test.", "range": "24h"},
        lambda c: [str(e.pk) for e in c["events"]], "before", "event_id",
    ),
    "tools": ("/tools/", {}, lambda c: [t.name for t in c["tools"]], "", "tool"),
    "combinations": (
        "/combinations/", {}, lambda c: [str(combo.pk) for combo, *_ in c["rows"]], "",
        "combination_id",
    ),
}  # fmt: skip
NEXT = {"before": "next_before", "after": "next_after"}


def _every_page(client: Client, path: str, params: dict[str, str], ids, cursor: str) -> list:
    shown, query = [], dict(params)
    while True:
        page = client.get(path, query, secure=True)
        assert page.status_code == 200, page.content[:300]
        assert "format=csv" in page.content.decode()  # the page offers its export
        shown += ids(page.context)
        following = page.context.get(NEXT.get(cursor, ""), None) if cursor else None
        if following is None:
            return shown
        query = {**params, cursor: str(following)}


@pytest.mark.parametrize("name", LISTS)
def test_the_csv_is_every_row_the_filters_match_in_the_pages_order(admin, name) -> None:
    path, params, ids, cursor, column = LISTS[name]
    shown = _every_page(admin, path, params, ids, cursor)
    assert shown, "the filters match rows"
    exported = _rows(admin.get(path, {**params, "format": "csv"}, secure=True))
    assert [row[column] for row in exported] == shown


@pytest.mark.parametrize("name", ["calls", "unknown", "audit"])
def test_an_export_has_every_page_not_only_the_first(admin, name) -> None:
    path, params, ids, *_ = LISTS[name]
    first = ids(admin.get(path, params, secure=True).context)
    exported = _rows(admin.get(path, {**params, "format": "csv"}, secure=True))
    assert len(exported) > len(first)


@pytest.mark.parametrize("name", LISTS)
def test_an_export_has_the_pages_columns_and_is_streamed(admin, name) -> None:
    path, params, *_ = LISTS[name]
    response = admin.get(path, {**params, "format": "csv"}, secure=True)
    assert isinstance(response, StreamingHttpResponse)
    assert response["Cache-Control"].startswith("max-age=0")  # like every console page


@pytest.mark.parametrize(
    ("role", "path"),
    [
        ("operator", "/approvals/"),
        ("operator", "/combinations/"),
        ("approver", "/unknown/"),
        ("approver", "/combinations/"),
        ("manager", "/unknown/"),
        ("manager", "/approvals/"),
        ("", "/unknown/"),
        ("", "/approvals/"),
        ("", "/ledger/"),
    ],
)
def test_an_export_is_refused_to_a_role_the_page_is_refused_to(
    django_user_model, tenants, role, path
) -> None:
    client = signed_in(make_user(django_user_model, "someone", tenants[0], role))
    response = client.get(path, {"format": "csv"}, secure=True)
    assert response.status_code == 403
    assert not response["Content-Type"].startswith("text/csv")


def test_an_export_has_only_the_tenants_rows(admin, tenants) -> None:
    ours, theirs = tenants
    theirs_keys = set(IdempotencyRecord.objects.filter(tenant=theirs).values_list("key", flat=True))
    for path, column in (("/unknown/", "idempotency_key"), ("/ledger/", "idempotency_key")):
        keys = {row[column] for row in _rows(admin.get(path, {"format": "csv"}, secure=True))}
        assert keys and not keys & theirs_keys
    labels = {
        row["combination"]
        for row in _rows(admin.get("/combinations/", {"format": "csv"}, secure=True))
    }
    assert labels == {"ours-c0", "ours-c1"}
    actions = _rows(admin.get("/audit/", {"format": "csv"}, secure=True))
    mine = set(AuditEvent.objects.filter(tenant=ours).values_list("pk", flat=True))
    assert {int(row["event_id"]) for row in actions} == mine


@pytest.mark.parametrize("path", ["/unknown/", "/approvals/", "/audit/", "/ledger/"])
def test_an_empty_result_still_offers_its_export(admin, path) -> None:
    params = {"tool": "no-such-tool"} if path != "/audit/" else {"actor": "no-such-actor"}
    page = admin.get(path, params, secure=True)
    assert page.status_code == 200 and "format=csv" in page.content.decode()
    response = admin.get(path, {**params, "format": "csv"}, secure=True)
    assert _rows(response) == []  # the header alone
    assert b"".join(response.streaming_content) == b""  # read once: nothing left


def test_a_cell_a_spreadsheet_would_run_is_quoted(admin, tenants) -> None:
    ours, _ = tenants
    record = IdempotencyRecord.objects.filter(tenant=ours).first()
    audit(tenant=ours, actor="=HYPERLINK(1)", action="test.formula", target=record, source="api")
    [row] = _rows(admin.get("/audit/", {"action": "test.formula", "format": "csv"}, secure=True))
    assert row["actor"] == "'=HYPERLINK(1)"
    assert [csv_export.cell(v) for v in ("+1", "-1", "@a", "\t", "a=b", "'=1", "'a")] == [
        "'+1",
        "'-1",
        "'@a",
        "'\t",
        "a=b",
        "''=1",
        "''a",
    ]


@given(st.text())
def test_every_cell_reads_back_as_its_text(text: str) -> None:
    """The audit export is verified from its cells: the quoting must not lose a character."""
    assert csv_export.read_cell(csv_export.cell(text)) == text


def test_an_export_past_the_cap_is_cut_and_says_so(admin, monkeypatch) -> None:
    monkeypatch.setattr(csv_export, "MAX_EXPORT_ROWS", 5)
    response = admin.get("/audit/", {"format": "csv"}, secure=True)
    lines = b"".join(response.streaming_content).decode().splitlines()
    assert len(lines) == 1 + 5 + 1  # the header, the cap, the note
    assert lines[-1].startswith("# cut at 5 rows")


@pytest.mark.parametrize("name", LISTS)
def test_an_exports_query_count_does_not_grow_with_its_rows(
    django_user_model, tenants, name
) -> None:
    """The same statements for the tenant with ten times the rows (the server-side cursor
    fetches in chunks larger than either export)."""
    path, *_ = LISTS[name]
    counts = []
    for tenant in tenants:
        client = signed_in(make_user(django_user_model, f"root-{tenant.slug}", tenant, "admin"))
        client.get(path, secure=True)  # the session's first reads
        with CaptureQueriesContext(connection) as queries:
            rows = _rows(client.get(path, {"format": "csv"}, secure=True))
        assert rows
        counts.append(len(queries))
    assert counts[0] == counts[1]
