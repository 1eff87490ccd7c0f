"""What the ledger requires of replication (``ledger.replication``), and a commit waiting for a
synchronous standby that is not there, bounded by the request's budget
(``ledger.store_budget``): measured on a private cluster whose ``synchronous_standby_names``
names a standby that never connects. The drills of ``drill/drills/failover.py`` fail a real
primary over to its standby."""

from __future__ import annotations

import copy
import os
import time
from collections.abc import Iterator
from typing import Any

import pytest
from django.db import DatabaseError, connection
from django.db.utils import ConnectionHandler

from drill import clusters
from ledger import replication, store_budget
from ledger.store import NotSynchronous, store_trouble
from tests.api.conftest import ApiClient


@pytest.mark.parametrize(
    ("names", "commit", "lacking"),
    [
        ("standby1", "on", None),
        ("FIRST 1 (a, b)", "remote_apply", None),
        ("ANY 1 (a, b)", "remote_write", None),
        ("", "on", "synchronous_standby_names is empty"),
        ("  ", "remote_apply", "synchronous_standby_names is empty"),
        ("standby1", "local", "synchronous_commit is local"),
        ("standby1", "off", "synchronous_commit is off"),
    ],
)
def test_what_keeps_commits_from_waiting_for_a_standby(names, commit, lacking) -> None:
    assert replication.lacking(names, commit) == lacking


@pytest.mark.django_db(transaction=True)
def test_an_asynchronous_database_is_refused_when_synchronous_commit_is_required(
    api: ApiClient, client, settings
) -> None:
    """The shared test server has no synchronous standby: with the requirement on, a new
    connection is refused before it serves, and /readyz says why."""
    assert api.post("/runs", {"run_id": "r-async", "user_id": "u"}).status_code in (200, 201)
    settings.DATABASE_REQUIRE_SYNCHRONOUS_COMMIT = True
    connection.close()
    refused = api.post("/runs", {"run_id": "r-refused", "user_id": "u"})
    assert refused.status_code == 503, refused.content
    assert refused.json()["reason"] == "replication_not_synchronous"
    assert refused["Retry-After"]
    ready = client.get("/readyz")
    assert ready.status_code == 503
    assert ready.json()["checks"]["database"] == (
        "replication_not_synchronous: synchronous_standby_names is empty"
    )
    settings.DATABASE_REQUIRE_SYNCHRONOUS_COMMIT = False
    connection.close()
    assert api.post("/runs", {"run_id": "r-refused", "user_id": "u"}).status_code in (200, 201)


@pytest.fixture(scope="module")
def waiting_primary() -> Iterator[clusters.Cluster]:
    """A private primary whose commits wait for a standby named ``missing``, which never
    connects: what a primary does while its synchronous standby is down."""
    why = clusters.available()
    if why:
        pytest.skip(why)
    cluster = clusters.Cluster(f"al_sync_wait_{os.getpid()}")
    try:
        cluster.create(settings={"fsync": "off"})
        with cluster.admin() as conn:
            conn.execute("CREATE TABLE decisions (id int)")
        cluster.set("synchronous_standby_names", "'missing'")  # from here every commit waits
        yield cluster
    finally:
        cluster.drop()


@pytest.fixture
def private_access(django_db_blocker) -> Iterator[None]:
    """Django connections of the test's own to the private cluster (not the test database)."""
    with django_db_blocker.unblock():
        yield


def _database(cluster: clusters.Cluster, **options: Any) -> Any:
    """A Django connection of its own to ``cluster``, set up as the service's is."""
    settings_dict = copy.deepcopy(connection.settings_dict)
    settings_dict.update(NAME="postgres", HOST="127.0.0.1", PORT=str(cluster.port), USER="postgres")
    settings_dict["OPTIONS"].update(options)
    return ConnectionHandler({"default": settings_dict})["default"]


def test_a_commit_waiting_for_a_missing_standby_is_cut_at_the_budget(
    waiting_primary, private_access
) -> None:
    database = _database(waiting_primary)
    began = time.monotonic()
    with store_budget.bounded(1.5, database=database), pytest.raises(DatabaseError) as raised:
        try:
            with database.cursor() as cursor:  # autocommit: the INSERT commits
                cursor.execute("INSERT INTO decisions VALUES (1)")
        except DatabaseError as exc:
            trouble = store_trouble(exc)
            raise
    took = time.monotonic() - began
    database.close()
    assert 1.4 < took < 3, took
    assert raised.value is not None and trouble is not None
    assert trouble.reason == "database_timeout" and trouble.retry_after_seconds


def test_a_waiting_primary_meets_the_requirement_and_a_local_session_does_not(
    waiting_primary, private_access, settings
) -> None:
    settings.DATABASE_REQUIRE_SYNCHRONOUS_COMMIT = True
    meets = _database(waiting_primary)
    with meets.cursor() as cursor:  # connecting runs the check
        cursor.execute("SELECT 1")
    meets.close()
    local = _database(waiting_primary, options="-c synchronous_commit=local")
    with pytest.raises(NotSynchronous, match="synchronous_commit is local"):
        local.ensure_connection()
    assert local.connection is None  # closed, so the next request checks afresh
