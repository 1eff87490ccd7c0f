"""The precompiled cursor (ledger.sql.raw_cursor) behaves as ``connection.cursor()`` does,
through methods of Django's database wrapper that Django does not document: these tests fail
when Django changes one of them."""

from __future__ import annotations

import inspect
import threading

import pytest
from django.db import DEFAULT_DB_ALIAS, DatabaseError, ProgrammingError, connections
from django.db.backends.base.base import BaseDatabaseWrapper

from ledger.sql.raw_cursor import precompiled_cursor

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize(
    ("method", "parameters"),
    [
        ("close_if_health_check_failed", ["self"]),
        ("validate_thread_sharing", ["self"]),
        ("make_cursor", ["self", "cursor"]),
    ],
)
def test_the_wrapper_methods_it_calls_take_what_it_passes(
    method: str, parameters: list[str]
) -> None:
    assert list(inspect.signature(getattr(BaseDatabaseWrapper, method)).parameters) == parameters


def test_its_statements_run_with_numbered_placeholders() -> None:
    db = connections[DEFAULT_DB_ALIAS]
    cursor, sql = precompiled_cursor(db, "SELECT %s::int + %s::int")
    assert sql == "SELECT $1::int + $2::int"
    with cursor:
        cursor.execute(sql, [2, 3])
        assert cursor.fetchone() == (5,)


def test_a_failing_statement_raises_djangos_error_class() -> None:
    db = connections[DEFAULT_DB_ALIAS]
    cursor, sql = precompiled_cursor(db, "SELECT * FROM no_such_table WHERE id = %s")
    with cursor, pytest.raises(ProgrammingError) as raised:
        cursor.execute(sql, [1])
    assert type(raised.value).__module__ == "django.db.utils"


def test_another_thread_cannot_use_the_connection() -> None:
    db = connections[DEFAULT_DB_ALIAS]
    db.ensure_connection()
    refused: list[BaseException] = []

    def use() -> None:
        try:
            precompiled_cursor(db, "SELECT 1")
        except DatabaseError as exc:
            refused.append(exc)

    thread = threading.Thread(target=use)
    thread.start()
    thread.join()
    assert len(refused) == 1 and "same thread" in str(refused[0])


@pytest.mark.django_db(transaction=True)
def test_a_broken_connection_is_replaced_when_health_checks_are_on() -> None:
    db = connections[DEFAULT_DB_ALIAS]
    db.ensure_connection()
    db.health_check_enabled, db.health_check_done = True, False
    try:
        db.connection.close()  # the server side of it gone, as after a restart
        cursor, sql = precompiled_cursor(db, "SELECT %s::int")
        with cursor:
            cursor.execute(sql, [7])
            assert cursor.fetchone() == (7,)
    finally:
        db.health_check_enabled = False
