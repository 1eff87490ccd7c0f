"""The precompiled statements of the hot path and the look-up path (ledger.sql.statements)
write and read exactly what the ORM would."""

from __future__ import annotations

import pytest
from django.db.models import F
from django.test import override_settings
from django.utils import timezone

from ledger.domain import RecordState
from ledger.models import ApprovalRequest, AuditEvent, IdempotencyRecord, Run, Tool
from ledger.services.audit import audit
from ledger.sql.raw_cursor import numbered
from ledger.sql.statements import (
    JoinedRow,
    execute_update,
    fetch_joined,
    insert_all,
    select_columns,
    update_parts,
)
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


def test_null_matches_and_lookups_are_written_as_django_writes_them(record) -> None:
    """``= NULL`` matches nothing in SQL; the ORM writes ``IS NULL``, and so must this."""
    assert record.run_id is None
    assert (
        execute_update(IdempotencyRecord, {"pk": record.pk, "run_id": None}, {"executions": 5}) == 1
    )
    assert (
        execute_update(
            IdempotencyRecord,
            {"pk__in": [record.pk, None], "executions__gte": 5},
            {"executions": 6},
        )
        == 1
    )
    assert refresh(record).executions == 6


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
    # JSON columns come back decoded only if the field converters ran.
    execute_update(
        IdempotencyRecord, {"pk": record.pk}, {"error": {"code": "E", "at": [1, {"x": None}]}}
    )
    Tool.objects.filter(pk=record.tool_id).update(descriptor={"inputSchema": {"type": "object"}})
    sql = (
        f"SELECT {select_columns(IdempotencyRecord, 'r')}, {select_columns(Tool, 't')}, "  # noqa: S608
        f"{select_columns(Run, 'u')} FROM ledger_idempotencyrecord r "
        "JOIN ledger_tool t ON t.id = r.tool_id LEFT JOIN ledger_run u ON u.id = r.run_id "
        "WHERE r.id = %s"
    )
    found = fetch_joined(sql, [record.pk], (IdempotencyRecord, Tool, Run))
    assert found is not None
    loaded, tool = found.one(IdempotencyRecord), found.one(Tool)
    expected = IdempotencyRecord.objects.get(pk=record.pk)
    assert found.optional(Run) is None  # the LEFT JOIN found no run
    for field in IdempotencyRecord._meta.concrete_fields:
        assert getattr(loaded, field.attname) == getattr(expected, field.attname), field.name
    assert loaded.error == {"code": "E", "at": [1, {"x": None}]}
    expected_tool = Tool.objects.get(pk=expected.tool_id)
    for field in Tool._meta.concrete_fields:
        assert getattr(tool, field.attname) == getattr(expected_tool, field.attname), field.name
    assert tool.descriptor == {"inputSchema": {"type": "object"}}
    assert fetch_joined(sql, [-1], (IdempotencyRecord, Tool, Run)) is None


def test_rows_inserted_together_are_each_stored_as_the_orm_stores_them(record) -> None:
    from ledger.services.audit import audit_event
    from reconcile.models import ReconcileAttempt

    attempt = ReconcileAttempt(
        tenant_id=record.tenant_id,
        record=record,
        attempt=1,
        kind=ReconcileAttempt.Kind.DOWNSTREAM,
        outcome=ReconcileAttempt.Answer.FOUND,
        detail="found",
        evidence={"status": 200, "body": ["a", {"b": None}]},
        worker="w1",
    )
    event = audit_event(
        tenant=record.tenant_id,
        actor="worker:w1",
        action="reconcile.attempt",
        target=record,
        source=AuditEvent.Source.WORKER,
        after={"attempt": 1},
    )
    insert_all(attempt, event)
    assert attempt.pk is not None and event.pk is not None
    assert not attempt._state.adding and not event._state.adding
    stored = ReconcileAttempt.objects.get(pk=attempt.pk)
    assert stored.evidence == {"status": 200, "body": ["a", {"b": None}]}
    assert (stored.record_id, stored.attempt, stored.worker) == (record.pk, 1, "w1")
    assert stored.created_at == attempt.created_at
    loaded = AuditEvent.objects.get(pk=event.pk)
    assert (loaded.action, loaded.target_id, loaded.after) == (
        "reconcile.attempt",
        str(record.pk),
        {"attempt": 1},
    )


def test_a_query_that_selects_other_columns_than_its_models_is_refused(record) -> None:
    sql = f"SELECT {select_columns(Tool, 't')}, 1 FROM ledger_tool t WHERE t.id = %s"  # noqa: S608
    with pytest.raises(ValueError, match="columns"):
        fetch_joined(sql, [record.tool_id], (Tool,))


def test_a_joined_row_gives_each_model_by_its_type_and_none_only_when_asked_for(record) -> None:
    sql = (
        f"SELECT {select_columns(Tool, 't')}, {select_columns(Run, 'u')}, 7 "  # noqa: S608
        "FROM ledger_tool t LEFT JOIN ledger_run u ON false WHERE t.id = %s"
    )
    found = fetch_joined(sql, [record.tool_id], (Tool, Run), trailing=1)
    assert found is not None and found.values == (7,)
    assert found.one(Tool).pk == record.tool_id
    assert found.optional(Run) is None
    with pytest.raises(LookupError, match="no Run"):
        found.one(Run)


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


@pytest.mark.django_db(transaction=True)
def test_a_migration_that_changes_a_column_type_does_not_break_prepared_statements() -> None:
    """A prepared statement whose result columns change type fails with "cached plan must not
    change result type" until it is prepared again; a deploy's migration must not break every
    open connection's token look-up until the connection is recycled."""
    from django.db import connection

    tenant = make_tenant()
    tool = make_tool(tenant, "create_order")
    sql = f"SELECT {select_columns(Tool, 't')} FROM ledger_tool t WHERE t.id = %s"  # noqa: S608
    for _ in range(2):  # prepared on this connection
        assert fetch_joined(sql, [tool.pk], (Tool,)) is not None
    width = Tool._meta.get_field("name").max_length
    # The migration runs elsewhere (psycopg forgets its statements when it sees an ALTER on
    # its own connection, so that would prove nothing).
    migration = connection.get_new_connection(connection.get_connection_params())
    migration.autocommit = True
    alter = "ALTER TABLE ledger_tool ALTER COLUMN name TYPE varchar({})"
    try:
        migration.execute(alter.format(width + 50))
        found = fetch_joined(sql, [tool.pk], (Tool,))
        assert found is not None and found.one(Tool).name == "create_order"
    finally:
        migration.execute(alter.format(width))
        migration.close()


def test_placeholders_are_numbered_as_postgresql_writes_them() -> None:
    assert numbered("SELECT %s, %s WHERE a LIKE 'x%%'") == "SELECT $1, $2 WHERE a LIKE 'x%'"
    for wrong in ("SELECT %(name)s", "SELECT 5 %"):
        with pytest.raises(ValueError, match="only %s"):
            numbered(wrong)


def _statements_sent(run) -> list[str]:
    from django.db import connection

    sent: list[str] = []

    def spy(execute, sql, params, many, context):
        sent.append(sql)
        return execute(sql, params, many, context)

    with connection.execute_wrapper(spy):
        run()
    return sent


def test_precompiled_statements_are_sent_numbered_and_logged_with_their_values(record) -> None:
    """psycopg parses a ``%s`` statement for its placeholders on every call when the statement
    is over 4 KB or 50 parameters; the precompiled ones go numbered through a ``RawCursor``.
    Where Django logs queries it fills the values into the text, so there they stay ``%s``."""
    sql = f"SELECT {select_columns(Tool, 't')} FROM ledger_tool t WHERE t.id = %s"  # noqa: S608
    found: list[object] = []
    sent = _statements_sent(lambda: found.append(fetch_joined(sql, [record.tool_id], (Tool,))))
    assert sent == [numbered(sql)] and "$1" in sent[0]
    assert isinstance(found[0], JoinedRow) and found[0].one(Tool).pk == record.tool_id

    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    with CaptureQueriesContext(connection) as logged:
        sent = _statements_sent(lambda: fetch_joined(sql, [record.tool_id], (Tool,)))
    assert sent == [sql]
    assert logged.captured_queries[0]["sql"].endswith(f"WHERE t.id = {record.tool_id}")


def test_a_changed_time_zone_loads_timestamps_as_the_orm_does(record) -> None:
    """Django sets a changed time zone on its own cursors; the precompiled statements then use
    Django's cursor, so their timestamps load as the ORM's do."""
    sql = f"SELECT {select_columns(Tool, 't')} FROM ledger_tool t WHERE t.id = %s"  # noqa: S608
    with override_settings(USE_TZ=False):
        found = fetch_joined(sql, [record.tool_id], (Tool,))
        by_orm = Tool.objects.get(pk=record.tool_id)
    assert found is not None
    assert found.one(Tool).created_at.tzinfo is None
    assert found.one(Tool).created_at == by_orm.created_at
    found = fetch_joined(sql, [record.tool_id], (Tool,))
    assert found is not None
    assert found.one(Tool).created_at.tzinfo is not None
