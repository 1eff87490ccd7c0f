"""Every console page costs a bounded number of queries, whatever the number of rows shown:
the list pages, and the page of one object (call, record, run, combination, approval, audit
event) however many related rows it lists."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from ledger.models import AuditEvent, IdempotencyRecord, LedgerEntry, Run, Tenant
from ledger.services import combinations, metrics
from ledger.services.audit import audit
from reconcile.models import ReconcileAttempt
from tests.api.conftest import ApiClient, client_for
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


# --- one-object pages: their related rows grow, their query count does not ---------------

Grow = Callable[[int, int], None]
# A page's path, how to add related rows, and the text that shows the last one added (None
# where the page shows no list of them).
ObjectPage = Callable[[Tenant], tuple[str, Grow, Callable[[int], str] | None]]


def _unknown_order(tenant: Tenant) -> tuple[ApiClient, dict]:
    api = client_for(tenant)
    api.start_run("run-o")
    call = api.call("create_order", {"cart": 1}, business_object_id="c1", run_id="run-o").json()
    api.post(f"/calls/{call['call_id']}/complete", {"fencing_token": 1, "outcome": "uncertain"})
    return api, call


def _grow_record(api: ApiClient, record: IdempotencyRecord) -> Grow:
    """Duplicate calls under the record's key, look-ups of it, and audit events about it."""

    def grow(start: int, n: int) -> None:
        for i in range(start, start + n):
            api.call("create_order", {"cart": 1}, business_object_id="c1", run_id="run-o")
            ReconcileAttempt.objects.create(
                tenant=record.tenant,
                record=record,
                attempt=i + 1,
                kind=ReconcileAttempt.Kind.DOWNSTREAM,
                outcome=ReconcileAttempt.Outcome.UNREACHABLE,
                detail=f"HTTP 503 #{i}",
                worker="w",
            )
            audit(tenant=record.tenant, actor="x", action="test.noted", target=record, source="api")

    return grow


def _call_page(tenant: Tenant) -> tuple[str, Grow, Callable[[int], str]]:
    api, call = _unknown_order(tenant)
    entry = LedgerEntry.objects.get(call_id=call["call_id"])
    assert entry.record is not None
    return f"/ledger/calls/{entry.pk}/", _grow_record(api, entry.record), "HTTP 503 #{}".format


def _record_page(tenant: Tenant) -> tuple[str, Grow, Callable[[int], str]]:
    api, call = _unknown_order(tenant)
    record = IdempotencyRecord.objects.get(key=call["idempotency_key"])
    return f"/ledger/records/{record.pk}/", _grow_record(api, record), "HTTP 503 #{}".format


def _run_page(tenant: Tenant) -> tuple[str, Grow, Callable[[int], str]]:
    api, _call = _unknown_order(tenant)

    def grow(start: int, n: int) -> None:
        for i in range(start, start + n):
            api.call("create_order", {"cart": i}, business_object_id=f"r{i}", run_id="run-o")

    return f"/ledger/runs/{Run.objects.get(run_id='run-o').pk}/", grow, ":r{}".format


def _combination_page(tenant: Tenant) -> tuple[str, Grow, Callable[[int], str]]:
    versions = {"model": "m", "rules": "r", "tool_schema": "t", "data_version": "d"}
    combo, _ = combinations.create_combination(
        tenant=tenant, label="c", actor="x", source="api", prompt="p", **versions
    )
    combinations.activate(tenant=tenant, combination_id=combo.pk, actor="x", source="api")
    api = client_for(tenant)

    def grow(start: int, n: int) -> None:
        for i in range(start, start + n):
            api.start_run(f"run-c{i}")
            api.call("read_file", {"i": i}, run_id=f"run-c{i}")
            audit(tenant=tenant, actor="x", action="test.noted", target=combo, source="api")
        metrics.roll_up()

    return f"/combinations/{combo.pk}/", grow, "run-c{}".format


def _approval_page(tenant: Tenant) -> tuple[str, Grow, None]:
    approval = make_pending(tenant, "app.py", run_id="run-p")
    record = approval.record

    def grow(start: int, n: int) -> None:
        for i in range(start, start + n):
            audit(tenant=tenant, actor="x", action="test.noted", target=record, source="api")
            audit(tenant=tenant, actor="x", action="test.noted", target=approval, source="api")
            ReconcileAttempt.objects.create(
                tenant=tenant,
                record=record,
                attempt=i + 1,
                kind=ReconcileAttempt.Kind.FILE_HASH,
                outcome=ReconcileAttempt.Outcome.APPLY_AGAIN,
                detail=f"app.py #{i}",
                worker="w",
            )

    return f"/approvals/{approval.pk}/", grow, None


def _audit_event_page(tenant: Tenant) -> tuple[str, Grow, None]:
    _api, call = _unknown_order(tenant)
    record = IdempotencyRecord.objects.get(key=call["idempotency_key"])
    event = audit(
        tenant=tenant, actor="x", action="test.noted", target=record, source="api", after={}
    )

    def grow(start: int, n: int) -> None:
        for i in range(start, start + n):  # other events about the same target
            audit(tenant=tenant, actor="x", action=f"test.{i}", target=record, source="api")

    return f"/audit/{event.pk}/", grow, None


def _two_combinations(tenant: Tenant) -> Any:
    versions = {"model": "m", "rules": "r", "tool_schema": "t", "data_version": "d"}
    for prompt in ("before", "bad"):
        combo, _ = combinations.create_combination(
            tenant=tenant, label=prompt, actor="x", source="api", prompt=prompt, **versions
        )
        combinations.activate(tenant=tenant, combination_id=combo.pk, actor="x", source="api")
    return combo


def _halt_page(tenant: Tenant) -> tuple[str, Grow, Callable[[int], str]]:
    """The halt page of the active combination: the approvals it voids, its runs in flight."""
    combo = _two_combinations(tenant)

    def grow(start: int, n: int) -> None:
        _approvals(tenant, start, n)

    return f"/combinations/{combo.pk}/halt", grow, "run-a{}".format


def _rollback_page(tenant: Tenant) -> tuple[str, Grow, Callable[[int], str]]:
    """A rollback's preview: its runs, approvals, unknown calls (none can be looked up, so
    each needs a human) and calls in flight."""
    combo = _two_combinations(tenant)

    def grow(start: int, n: int) -> None:
        _approvals(tenant, start, n)
        _unknown(tenant, start, n)

    return f"/combinations/{combo.pk}/rollback", grow, "create_order:c{}".format


OBJECT_PAGES: list[tuple[str, ObjectPage]] = [
    ("call", _call_page),
    ("record", _record_page),
    ("run", _run_page),
    ("combination", _combination_page),
    ("approval", _approval_page),
    ("audit-event", _audit_event_page),
    ("combination-halt", _halt_page),
    ("rollback", _rollback_page),
]


@pytest.mark.parametrize(("name", "page"), OBJECT_PAGES, ids=[n for n, _ in OBJECT_PAGES])
def test_an_objects_page_costs_the_same_queries_however_many_rows_it_shows(
    django_user_model, tenant, name, page
) -> None:
    client = signed_in(make_user(django_user_model, "root", tenant, "admin"))
    path, grow, last_shown = page(tenant)
    client.get(path, secure=True)  # a first visit writes once (opening an approval claims it)
    counts = []
    for start, n in ((0, 2), (2, 6)):
        grow(start, n)
        with CaptureQueriesContext(connection) as queries:
            response = client.get(path, secure=True)
        assert response.status_code == 200, (name, response.status_code)
        if last_shown is not None:
            assert last_shown(start + n - 1) in response.content.decode()
        counts.append(len(queries))
    assert counts[0] == counts[1], [q["sql"] for q in queries.captured_queries]
