"""A dedup hit (DESIGN section 9) is defined once, ``LedgerEntry.DEDUP_HIT`` for querysets and
``LedgerEntry.dedup_hit`` for one entry, and every place that counts or marks hits agrees: the
metric, each record's counter, the run timeline, the calls list and its CSV, the record page
and the call page's badge."""

from __future__ import annotations

import csv
import io
import re

import pytest

from ledger.domain import Decision
from ledger.models import IdempotencyRecord, LedgerEntry, Run
from ledger.services import metrics
from tests.api.conftest import client_for
from tests.console.conftest import make_user, signed_in

pytestmark = pytest.mark.django_db

#: The decisions that are a dedup hit when a keyed request finds its key's record.
ANSWERED_FROM_RECORD = {
    Decision.RECORDED_RESULT,
    Decision.WAIT,
    Decision.APPROVAL_REQUIRED,
    Decision.FORBIDDEN,
}


@pytest.mark.parametrize("decision", list(Decision))
@pytest.mark.parametrize("reused_record", [True, False])
@pytest.mark.parametrize("key", ["agent:t:u:r:read_file:s", ""])
def test_the_entry_property_and_the_queryset_filter_agree(decision, reused_record, key) -> None:
    entry = LedgerEntry(decision=decision, reused_record=reused_record, idempotency_key=key)
    in_sql = LedgerEntry.DEDUP_HIT.check(
        {"decision": decision.value, "reused_record": reused_record, "idempotency_key": key}
    )
    assert entry.dedup_hit is in_sql
    assert entry.dedup_hit is (reused_record and key != "" and decision in ANSWERED_FROM_RECORD)


BADGE = ">dedup hit</span>"


def _hits_said(html: str) -> int:
    """The number in "N dedup hit(s)" on a page."""
    found = re.search(r"(\d+) dedup hits?\b", html)
    assert found is not None, "the page gives no count of dedup hits"
    return int(found.group(1))


def test_every_count_and_badge_of_dedup_hits_agrees(django_user_model, tenant) -> None:
    """One action's calls: a first call, a replay that re-executed, a duplicate answered from
    the record, a conflict, and a replay answered from the record: two dedup hits."""
    api = client_for(tenant)
    api.start_run("run-dedup")
    ask = {"run_id": "run-dedup", "step_id": "read"}
    first = api.call("read_file", {"path": "a.txt"}, **ask).json()
    assert first["decision"] == "execute"
    api.post(f"/calls/{first['call_id']}/complete", {"fencing_token": 1, "outcome": "uncertain"})
    again = api.post(f"/calls/{first['call_id']}/replay", {}).json()
    assert again["decision"] == "execute"  # an idempotent tool's replay runs it again
    api.post(
        f"/calls/{again['call_id']}/complete",
        {"fencing_token": again["lease"]["fencing_token"], "outcome": "succeeded", "result": {}},
    )
    duplicate = api.call("read_file", {"path": "a.txt"}, **ask).json()
    assert duplicate["decision"] == "recorded_result"
    conflict = api.call("read_file", {"path": "b.txt"}, **ask).json()
    assert conflict["decision"] == "conflict"
    replayed = api.post(f"/calls/{first['call_id']}/replay", {}).json()
    assert replayed["decision"] == "recorded_result"
    hits = {duplicate["call_id"], replayed["call_id"]}

    record = IdempotencyRecord.objects.get(key=first["idempotency_key"])
    entries = list(LedgerEntry.objects.filter(record=record))
    assert len(entries) == 5
    assert {str(e.call_id) for e in entries if e.dedup_hit} == hits
    assert LedgerEntry.objects.filter(LedgerEntry.DEDUP_HIT, record=record).count() == 2
    metrics.roll_up()
    assert metrics.summarize(tenant).dedup_hits == 2
    assert record.duplicate_hits == 2

    operator = signed_in(make_user(django_user_model, "op", tenant, "operator"))
    run = Run.objects.get(run_id="run-dedup")
    timeline = operator.get(f"/ledger/runs/{run.pk}/", secure=True).content.decode()
    assert _hits_said(timeline) == 2 and timeline.count(BADGE) == 2
    record_page = operator.get(f"/ledger/records/{record.pk}/", secure=True).content.decode()
    assert _hits_said(record_page) == 2 and record_page.count(BADGE) == 2
    listed = operator.get("/ledger/", {"run": "run-dedup"}, secure=True).content.decode()
    assert listed.count(BADGE) == 2
    exported = operator.get("/ledger/", {"run": "run-dedup", "format": "csv"}, secure=True)
    rows = list(csv.DictReader(io.StringIO(b"".join(exported.streaming_content).decode())))
    assert {row["call_id"] for row in rows if row["dedup_hit"] == "True"} == hits
    for entry in entries:
        page = operator.get(f"/ledger/calls/{entry.pk}/", secure=True).content.decode()
        assert (BADGE in page) is (str(entry.call_id) in hits), entry.decision
        assert _hits_said(page) == 2  # the action's count, on each of its calls
