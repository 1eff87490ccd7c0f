"""The audit table is append-only at the database level."""

from __future__ import annotations

import pytest
from django.db import DatabaseError, connection, transaction

from ledger.models import AuditEvent
from ledger.services.audit import audit

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
