"""The audit table is append-only at the database level: the one update PostgreSQL allows is
the seal of an unsealed event (its place in the hash chain), with nothing else changed."""

from __future__ import annotations

import pytest
from django.db import DatabaseError, connection, transaction

from ledger.models import AuditEvent
from ledger.services.audit import audit
from ledger.services.audit_sealing import seal_audit_events

pytestmark = pytest.mark.django_db


@pytest.fixture
def event(tenant) -> AuditEvent:
    return audit(
        tenant=tenant,
        actor="alice",
        action="tool.override_set",
        target=tenant,
        source="console",
        before={"a": 1},
        after={"a": 2},
    )


def test_update_through_the_orm_fails(event: AuditEvent) -> None:
    with pytest.raises(DatabaseError, match="append-only"), transaction.atomic():
        AuditEvent.objects.filter(pk=event.pk).update(actor="mallory")
    assert AuditEvent.objects.get(pk=event.pk).actor == "alice"


def test_delete_through_the_orm_fails(event: AuditEvent) -> None:
    with pytest.raises(DatabaseError, match="append-only"), transaction.atomic():
        AuditEvent.objects.filter(pk=event.pk).delete()
    assert AuditEvent.objects.filter(pk=event.pk).exists()


@pytest.mark.parametrize(
    "sql", ["UPDATE ledger_auditevent SET actor = 'x'", "DELETE FROM ledger_auditevent"]
)
def test_raw_sql_cannot_rewrite_the_audit_trail(event: AuditEvent, sql: str) -> None:
    with (
        pytest.raises(DatabaseError, match="append-only"),
        transaction.atomic(),
        connection.cursor() as cursor,
    ):
        cursor.execute(sql)
    assert AuditEvent.objects.get(pk=event.pk).actor == "alice"


def test_insert_still_works(event: AuditEvent) -> None:
    assert AuditEvent.objects.count() == 1


A_DIGEST, ANOTHER = "a" * 64, "b" * 64


def _refused(sql: str, params: list[object]) -> None:
    with (
        pytest.raises(DatabaseError, match=r"append-only|inserted unsealed"),
        transaction.atomic(),
        connection.cursor() as cursor,
    ):
        cursor.execute(sql, params)


def _update(assignments: str) -> str:
    return f"UPDATE ledger_auditevent SET {assignments} WHERE id = %s"  # noqa: S608 - the test's own


def test_sealing_an_unsealed_event_is_allowed(event: AuditEvent) -> None:
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE ledger_auditevent SET seq = 1, prev_digest = %s, digest = %s WHERE id = %s",
            [A_DIGEST, ANOTHER, event.pk],
        )
    event.refresh_from_db()
    assert (event.seq, event.prev_digest, event.digest) == (1, A_DIGEST, ANOTHER)


@pytest.mark.parametrize(
    "assignments",
    [
        "seq = 1, prev_digest = %s, digest = %s, actor = 'mallory'",
        "seq = 1, prev_digest = %s, digest = %s, after = '{}'::jsonb",
        "seq = 1, prev_digest = %s, digest = %s, created_at = created_at - interval '1 day'",
        "seq = 1, prev_digest = %s, digest = %s, tenant_id = NULL",
    ],
)
def test_a_seal_that_changes_anything_else_is_refused(event: AuditEvent, assignments: str) -> None:
    _refused(_update(assignments), [A_DIGEST, ANOTHER, event.pk])
    event.refresh_from_db()
    assert event.seq is None and event.actor == "alice"


def test_half_a_seal_is_refused(event: AuditEvent) -> None:
    _refused("UPDATE ledger_auditevent SET seq = 1 WHERE id = %s", [event.pk])


@pytest.mark.parametrize(
    ("assignments", "params"),
    [
        ("digest = %s", [ANOTHER]),
        ("prev_digest = %s", [ANOTHER]),
        ("seq = seq + 1", []),
        ("seq = NULL, prev_digest = NULL, digest = NULL", []),
        ("actor = 'mallory'", []),
    ],
)
def test_a_sealed_event_cannot_be_changed_not_even_its_seal(
    event: AuditEvent, assignments: str, params: list[object]
) -> None:
    seal_audit_events()
    event.refresh_from_db()
    sealed = (event.seq, event.prev_digest, event.digest)
    _refused(_update(assignments), [*params, event.pk])
    event.refresh_from_db()
    assert (event.seq, event.prev_digest, event.digest) == sealed and event.actor == "alice"


def test_a_sealed_event_cannot_be_deleted(event: AuditEvent) -> None:
    seal_audit_events()
    _refused("DELETE FROM ledger_auditevent WHERE id = %s", [event.pk])


def test_an_event_cannot_be_inserted_sealed(event: AuditEvent) -> None:
    _refused(
        "INSERT INTO ledger_auditevent (tenant_id, actor, action, target_type, target_id, "
        "source, outcome, detail, created_at, seq, prev_digest, digest) "
        "SELECT tenant_id, actor, action, target_type, target_id, source, outcome, detail, "
        "created_at, 2, %s, %s FROM ledger_auditevent WHERE id = %s",
        [A_DIGEST, ANOTHER, event.pk],
    )
    assert AuditEvent.objects.count() == 1
