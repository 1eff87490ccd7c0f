"""The database short of a resource (SQLSTATE class 53: a full disk's "could not extend
file", out of memory, out of connection slots, a configured limit) is 503 with its reason and
Retry-After, never a bare 500. Each error is raised by PostgreSQL itself, from a trigger on
the table a new run is written to; the drill ``disk_full`` fills a real file system."""

from __future__ import annotations

import pytest
from django.db import connection

from ledger.models import Run
from tests.api.conftest import ApiClient

pytestmark = pytest.mark.django_db


def _refuse_runs(sqlstate: str) -> None:
    with connection.cursor() as cursor:
        cursor.execute(
            "CREATE FUNCTION pg_temp.refuse() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
            f"RAISE EXCEPTION 'refused by the test' USING ERRCODE = '{sqlstate}'; END $$"
        )
        cursor.execute(
            "CREATE TRIGGER refuse BEFORE INSERT ON ledger_run "
            "FOR EACH ROW EXECUTE FUNCTION pg_temp.refuse()"
        )


@pytest.mark.parametrize(
    ("sqlstate", "reason"),
    [
        ("53100", "disk_full"),
        ("53200", "out_of_memory"),
        ("53300", "too_many_connections"),
        ("53400", "configuration_limit_exceeded"),
        ("53000", "insufficient_resources"),
    ],
)
def test_a_database_short_of_a_resource_is_503_with_its_reason(
    api: ApiClient, sqlstate: str, reason: str
) -> None:
    _refuse_runs(sqlstate)
    refused = api.post("/runs", {"run_id": "r-full", "user_id": "u"})
    assert refused.status_code == 503, refused.content
    body = refused.json()
    assert body["code"] == "LEDGER_STORE_UNAVAILABLE" and body["reason"] == reason
    assert refused["Retry-After"]
    assert not Run.objects.filter(run_id="r-full").exists()
