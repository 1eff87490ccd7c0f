"""Shared fixtures. The suite runs against real PostgreSQL (``make test`` sets it up)."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
from django.db import connection
from django.test import override_settings
from hypothesis import settings as hypothesis_settings
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from tests.factories import make_tenant, make_tool
from tests.sandbox_fixtures import sandbox  # noqa: F401 - a fixture for every test module


def pytest_sessionstart(session: pytest.Session) -> None:
    if connection.vendor != "postgresql":
        pytest.exit(
            "The test suite needs PostgreSQL: run it with `make test` (or set DATABASE_URL).",
            returncode=2,
        )


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every collected test has an id of its own. The workers of `make test` (pytest-xdist)
    hand tests out and report them by id, so two tests with one id would run and be reported
    as one. schemathesis names each API operation's test in its ``name`` only (the id is the
    test function's for all of them); the operation goes into the id here."""
    for item in items:
        label = getattr(item, "operation_label", None)
        if label and not item.nodeid.endswith("]"):
            _rename(item, f"{item.nodeid}[{label}]")
    seen: dict[str, int] = {}
    for item in items:
        seen[item.nodeid] = seen.get(item.nodeid, 0) + 1
    repeated = sorted(nodeid for nodeid, count in seen.items() if count > 1)
    if repeated:
        raise pytest.UsageError(f"tests collected twice under one id: {repeated[:5]}")


def _rename(item: pytest.Item, nodeid: str) -> None:
    """pytest keeps a node's id in a private attribute (pytest 9: a parsed ``_id``; pytest 8:
    the string ``_nodeid``); the check after the renaming fails loudly if neither is it."""
    if hasattr(item, "_id"):
        from _pytest.nodeid import coerce_node_id

        item._id = coerce_node_id(nodeid)
    else:
        item._nodeid = nodeid


@pytest.fixture(scope="session", autouse=True)
def _fast_password_hashing() -> Iterator[None]:
    """Django's production hasher (PBKDF2, 1,000,000 iterations) takes a third of a second a
    password on a small machine, and the console tests create users by the hundred; none of
    them tests hashing. Django's own advice for test suites."""
    with override_settings(PASSWORD_HASHERS=["django.contrib.auth.hashers.MD5PasswordHasher"]):
        yield


#: The tables whose rows a trigger refuses to delete (the audit log is append-only).
_GUARDED = """
    SELECT DISTINCT c.relname FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid
    WHERE NOT t.tgisinternal AND t.tgtype & 8 <> 0 AND c.relname = ANY(%s)
"""


@pytest.fixture(scope="session", autouse=True)
def _flush_by_delete() -> Iterator[None]:
    """A transactional test ends with Django's flush, which TRUNCATEs every table: on
    PostgreSQL each TRUNCATE makes new files and syncs them, half a second for the schema's
    tables, which hold a few rows. DELETE empties them in milliseconds. Django's foreign keys are
    deferred, so the order does not matter; the tables a trigger keeps rows in (the audit
    log) are still truncated, which fires no row trigger. Sequences go on as with Django's
    flush (``reset_sequences`` is off in this suite)."""
    from django.db.backends.postgresql.operations import DatabaseOperations

    truncate = DatabaseOperations.sql_flush

    def sql_flush(
        ops: DatabaseOperations,
        style: object,
        tables: list[str],
        *,
        reset_sequences: bool = False,
        allow_cascade: bool = False,
    ) -> list[str]:
        if reset_sequences or allow_cascade or not tables:
            return truncate(
                ops, style, tables, reset_sequences=reset_sequences, allow_cascade=allow_cascade
            )
        with ops.connection.cursor() as cursor:
            cursor.execute(_GUARDED, [list(tables)])
            guarded = sorted(name for (name,) in cursor.fetchall())
        quoted = ops.quote_name
        statements = [f"TRUNCATE {', '.join(quoted(name) for name in guarded)}"] if guarded else []
        # The names are Django's own tables, from its introspection, quoted.
        deletes = [f"DELETE FROM {quoted(name)}" for name in tables if name not in guarded]  # noqa: S608
        return statements + deletes

    DatabaseOperations.sql_flush = sql_flush  # type: ignore[method-assign]
    try:
        yield
    finally:
        DatabaseOperations.sql_flush = truncate  # type: ignore[method-assign]


@pytest.fixture(scope="session", autouse=True)
def _empty_test_queues() -> None:
    """Tests that commit enqueue look-ups nobody consumes; start every run with empty queues."""
    from django.conf import settings

    if settings.CELERY_BROKER_URL.startswith("redis"):
        import redis

        redis.Redis.from_url(settings.CELERY_BROKER_URL).delete("reconcile", "maintenance")


@pytest.fixture
def spans(monkeypatch: pytest.MonkeyPatch) -> InMemorySpanExporter:
    """The spans this test's server side ends (the SDK's in-memory exporter). The global
    provider may be set only once per process, so the test swaps it in and back out."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    monkeypatch.setattr(trace, "_TRACER_PROVIDER", provider)
    return exporter


@pytest.fixture
def private_downstreams(settings) -> None:
    """Outbound requests may go to private addresses: the sandbox and the tests' own
    downstreams listen on 127.0.0.1, which ``ledger.outbound`` refuses by default."""
    settings.LEDGER_OUTBOUND_ALLOW_PRIVATE = True


@pytest.fixture
def tenant(db):
    return make_tenant("acme")


@pytest.fixture
def other_tenant(db):
    return make_tenant("globex")


@pytest.fixture
def create_order(tenant):
    return make_tool(tenant, "create_order")


@pytest.fixture
def read_file(tenant):
    return make_tool(tenant, "read_file")


# CI explores a fixed set of examples so a run is reproducible; set HYPOTHESIS_PROFILE=explore
# locally to search further (and add any counterexample it finds to the tables). A property
# whose every example drives the API and the console (tests/test_planted_secrets.py) takes a
# hundredth of the profile's examples.
# The properties assert behaviour, not speed (speed is `make bench`'s): no example has a
# deadline, which a busy two-core machine would miss now and then.
hypothesis_settings.register_profile("ci", derandomize=True, max_examples=300, deadline=None)
hypothesis_settings.register_profile("explore", max_examples=5000, deadline=None)
# `make mutate` runs the covering tests once per mutant: fewer examples keep that within reach.
hypothesis_settings.register_profile("mutate", derandomize=True, max_examples=20, deadline=None)
hypothesis_settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))
