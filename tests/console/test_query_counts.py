"""Every console page costs a bounded number of queries, whatever the number of rows shown:
the list pages, and the page of one object (call, record, run, combination, approval, audit
event) however many related rows it lists."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from ledger import combinations
from ledger.models import (
    AuditEvent,
    DeclaredCompensation,
    IdempotencyRecord,
    LedgerEntry,
    Run,
    Tenant,
)
from ledger.services import metrics
from ledger.services.audit import audit
from reconcile.models import CompensationAdapter, ReconcileAttempt
from tests.api.conftest import ApiClient, client_for
from tests.console.conftest import make_pending, make_shadow_pair, make_user, signed_in
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
                outcome=ReconcileAttempt.Answer.UNREACHABLE,
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


def _unknown_page(tenant: Tenant) -> tuple[str, Grow, Callable[[int], str]]:
    api, call = _unknown_order(tenant)
    record = IdempotencyRecord.objects.get(key=call["idempotency_key"])
    return f"/unknown/{record.pk}/", _grow_record(api, record), "HTTP 503 #{}".format


def _shadow_page(tenant: Tenant) -> tuple[str, Grow, Callable[[int], str]]:
    make_shadow_pair(tenant, live_id="live-q", shadow_id="shadow-q")
    api = client_for(tenant)

    def grow(start: int, n: int) -> None:
        for i in range(start, start + n):
            make_tool(tenant, f"tool_{i}")
            for run_id in ("live-q", "shadow-q"):
                api.call(f"tool_{i}", {"i": i}, run_id=run_id, step_id=f"s-{i}")

    return f"/shadow/{Run.objects.get(run_id='shadow-q').pk}/", grow, "tool_{}".format


def _compensated(tenant: Tenant) -> tuple[ApiClient, IdempotencyRecord]:
    """A succeeded order whose compensation is declared."""
    orders, cancel = make_tool(tenant, "create_order"), make_tool(tenant, "cancel_order")
    CompensationAdapter.objects.create(
        tenant=tenant, tool=cancel, url_template="https://shop.example/orders/{order_id}/cancel"
    )
    DeclaredCompensation.objects.create(
        tenant=tenant,
        tool=orders,
        compensating_tool=cancel,
        arguments={"order_id": "result.id"},
        declared_by="test",
    )
    api = client_for(tenant)
    api.start_run("run-comp")
    call = api.call("create_order", {"cart": 0}, run_id="run-comp", business_object_id="c0")
    api.post(
        f"/calls/{call.json()['call_id']}/complete",
        {"fencing_token": 1, "outcome": "succeeded", "result": {"id": "o-0"}},
    )
    return api, IdempotencyRecord.objects.get(key=call.json()["idempotency_key"])


def _record_compensation_page(tenant: Tenant) -> tuple[str, Grow, None]:
    api, record = _compensated(tenant)

    def grow(start: int, n: int) -> None:  # duplicates of the action, answered from its record
        for _ in range(start, start + n):
            api.call("create_order", {"cart": 0}, run_id="run-comp", business_object_id="c0")

    return f"/compensations/records/{record.pk}/", grow, None


def _run_compensation_page(tenant: Tenant) -> tuple[str, Grow, Callable[[int], str]]:
    api, record = _compensated(tenant)

    def grow(start: int, n: int) -> None:  # more orders of the run, each one a saga step
        for i in range(start + 1, start + n + 1):
            call = api.call(
                "create_order", {"cart": i}, run_id="run-comp", business_object_id=f"c{i}"
            )
            api.post(
                f"/calls/{call.json()['call_id']}/complete",
                {"fencing_token": 1, "outcome": "succeeded", "result": {"id": f"o-{i}"}},
            )

    return f"/compensations/runs/{record.run_id}/", grow, ":c{}".format


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
                outcome=ReconcileAttempt.Answer.APPLY_AGAIN,
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


OBJECT_PAGES = [
    pytest.param("call", _call_page, id="call"),
    pytest.param("record", _record_page, id="record"),
    pytest.param("unknown", _unknown_page, id="unknown"),
    pytest.param("shadow", _shadow_page, id="shadow"),
    pytest.param("record-compensation", _record_compensation_page, id="record-compensation"),
    pytest.param("run-compensation", _run_compensation_page, id="run-compensation"),
    pytest.param("run", _run_page, id="run"),
    pytest.param("combination", _combination_page, id="combination"),
    pytest.param("approval", _approval_page, id="approval"),
    pytest.param("audit-event", _audit_event_page, id="audit-event"),
    pytest.param("combination-halt", _halt_page, id="combination-halt"),
    pytest.param("rollback", _rollback_page, id="rollback"),
]


@pytest.mark.parametrize(("name", "page"), OBJECT_PAGES)
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
