"""The precompiled statements of the hot path and the look-up path (ledger.services.statements)
write and read exactly what the ORM would."""

from __future__ import annotations

import pytest
from django.db.models import F
from django.utils import timezone

from ledger.domain import RecordState
from ledger.models import ApprovalRequest, AuditEvent, IdempotencyRecord, Run, Tool
from ledger.services.audit import audit
from ledger.services.statements import execute_update, fetch_joined, select_columns, update_parts
from tests.factories import make_tenant, make_tool, refresh, reserve

pytestmark = pytest.mark.django_db


@pytest.fixture
def record() -> IdempotencyRecord:
    tenant = make_tenant()
    tool = make_tool(tenant, "create_order")
    return reserve(tenant, tool).record


def test_an_update_changes_only_the_rows_its_conditions_match(record) -> None:
    now = timezone.now()
    assert (
        execute_update(
            IdempotencyRecord,
            {"pk": record.pk, "state": RecordState.SUCCEEDED},
            {"lease_owner": "x"},
        )
        == 0
    )
    assert refresh(record).lease_owner == record.lease_owner
    changes = {"lease_owner": "worker-2", "updated_at": now, "error": {"code": "E", "n": [1, 2]}}
    assert (
        execute_update(
            IdempotencyRecord, {"pk": record.pk, "state": RecordState.EXECUTING}, changes
        )
        == 1
    )
    stored = refresh(record)
    assert (stored.lease_owner, stored.updated_at, stored.error) == (
        "worker-2",
        now,
        changes["error"],
    )


def test_in_lists_match_any_member_and_foreign_keys_by_id(record) -> None:
    open_states = list(ApprovalRequest.OPEN_STATES)
    sql, params = update_parts(
        ApprovalRequest, {"record_id": record.pk, "state__in": open_states}, {"state": "x"}
    )
    assert sql.count("%s") == len(params) == 2 + len(open_states)
    assert params[1:] == [record.pk, *open_states]
    assert (
        execute_update(
            IdempotencyRecord,
            {"pk__in": [record.pk, record.pk + 10**6]},
            {"executions": 7},
        )
        == 1
    )
    assert refresh(record).executions == 7


def test_expressions_are_compiled_by_django(record) -> None:
    executions = refresh(record).executions
    assert (
        execute_update(IdempotencyRecord, {"pk": record.pk}, {"executions": F("executions") + 2})
        == 1
    )
    assert refresh(record).executions == executions + 2


def test_a_joined_row_comes_back_as_instances_with_converted_values(record) -> None:
    event = audit(
        tenant=record.tenant_id,
        actor="tester",
        action="test.event",
        target=record,
        source=AuditEvent.Source.API,
        after={"nested": {"list": [1, "two"]}},
    )
    assert AuditEvent.objects.get(pk=event.pk).after == {"nested": {"list": [1, "two"]}}
    sql = (
        f"SELECT {select_columns(IdempotencyRecord, 'r')}, {select_columns(Tool, 't')}, "  # noqa: S608
        f"{select_columns(Run, 'u')} FROM ledger_idempotencyrecord r "
        "JOIN ledger_tool t ON t.id = r.tool_id LEFT JOIN ledger_run u ON u.id = r.run_id "
        "WHERE r.id = %s"
    )
    found = fetch_joined(sql, [record.pk], (IdempotencyRecord, Tool, Run))
    assert found is not None
    loaded, tool, run = found
    expected = IdempotencyRecord.objects.get(pk=record.pk)
    assert run is None  # the LEFT JOIN found no run
    assert isinstance(loaded, IdempotencyRecord) and isinstance(tool, Tool)
    for field in IdempotencyRecord._meta.concrete_fields:
        assert getattr(loaded, field.attname) == getattr(expected, field.attname), field.name
    assert tool.pk == expected.tool_id and tool.name == "create_order"
    assert fetch_joined(sql, [-1], (IdempotencyRecord, Tool, Run)) is None


def test_a_query_that_selects_other_columns_than_its_models_is_refused(record) -> None:
    sql = f"SELECT {select_columns(Tool, 't')}, 1 FROM ledger_tool t WHERE t.id = %s"  # noqa: S608
    with pytest.raises(AssertionError, match="columns"):
        fetch_joined(sql, [record.tool_id], (Tool,))


def test_only_the_precompiled_statements_are_prepared(record) -> None:
    """Prepared statements are planned once for any values: right for these unique-key
    look-ups, wrong for the ORM's console queries (a generic plan over a million rows)."""
    from django.db import connection

    for _ in range(6):
        assert IdempotencyRecord.objects.filter(key=record.key).count() == 1
        execute_update(IdempotencyRecord, {"pk": record.pk}, {"duplicate_hits": 1})
    assert connection.connection.prepare_threshold is None  # restored after each statement
    with connection.cursor() as cursor:
        cursor.execute("SELECT statement FROM pg_prepared_statements")
        prepared = [row[0] for row in cursor.fetchall()]
    assert any(s.startswith('UPDATE "ledger_idempotencyrecord" SET') for s in prepared)
    assert not any("COUNT(*)" in s for s in prepared), prepared
