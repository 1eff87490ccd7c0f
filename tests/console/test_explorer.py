"""The ledger explorer: search by every field, keyset pages, a run's timeline, bounded queries."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from ledger.models import LedgerEntry, Run
from tests.api.conftest import client_for
from tests.console.conftest import make_user, signed_in

pytestmark = pytest.mark.django_db


@pytest.fixture
def calls(tenant):
    """Two runs: run-1 reads a file three times (two dedup hits), run-2 creates an order."""
    api = client_for(tenant)
    api.start_run("run-1")
    first = api.call("read_file", {"path": "a.txt"}).json()
    api.post(
        f"/calls/{first['call_id']}/complete",
        {
            "fencing_token": first["lease"]["fencing_token"],
            "outcome": "succeeded",
            "result": {"text": "a"},
        },
    )
    for _ in range(2):
        api.call("read_file", {"path": "a.txt"})
    api.start_run("run-2")
    api.post(
        "/calls",
        {
            "run_id": "run-2",
            "step_id": "s1",
            "tool": "create_order",
            "input": {"cart": 7},
            "business_object_id": "cart-7",
        },
    )
    return api


@pytest.fixture
def operator(django_user_model, tenant):
    return signed_in(make_user(django_user_model, "op", tenant, "operator"))


def _tools(response) -> list[str]:
    return [entry.tool.name for entry in response.context["rows"]]


def test_calls_are_listed_newest_first_and_filtered_by_each_field(operator, tenant, calls):
    everything = operator.get("/ledger/", secure=True)
    assert everything.status_code == 200
    assert _tools(everything) == ["create_order", "read_file", "read_file", "read_file"]

    assert _tools(operator.get("/ledger/", {"run": "run-2"}, secure=True)) == ["create_order"]
    assert _tools(operator.get("/ledger/", {"tool": "read_file"}, secure=True)) == ["read_file"] * 3
    key = LedgerEntry.objects.filter(tool__name="read_file").first().idempotency_key
    assert len(operator.get("/ledger/", {"key": key}, secure=True).context["rows"]) == 3
    assert _tools(operator.get("/ledger/", {"decision": "recorded_result"}, secure=True)) == (
        ["read_file"] * 2
    )
    one = LedgerEntry.objects.filter(tool__name="create_order").get()
    # A call id's start lists the calls it matches (a whole one goes to the call's page).
    by_call = operator.get("/ledger/", {"call": str(one.call_id)[:13]}, secure=True)
    assert [e.pk for e in by_call.context["rows"]] == [one.pk]
    assert one.status == "started"  # the others succeeded
    assert _tools(operator.get("/ledger/", {"status": "started"}, secure=True)) == ["create_order"]
    later = operator.get("/ledger/", {"since": "2999-01-01T00:00"}, secure=True)
    assert later.context["rows"] == []
    assert b"No call matches" in later.content


def test_dedup_hits_are_marked(operator, calls):
    html = operator.get("/ledger/", {"tool": "read_file"}, secure=True).content.decode()
    assert html.count("dedup hit</span>") == 2


def test_bad_filters_are_a_400_with_the_error_shown(operator, calls):
    response = operator.get("/ledger/", {"call": "not-a-uuid", "since": "yesterday"}, secure=True)
    assert response.status_code == 400
    assert response.context["rows"] == []
    html = response.content.decode()
    assert "A call id (or its start) is hexadecimal digits" in html
    assert "Enter a valid date/time" in html
    assert operator.get("/ledger/", {"size": "100000"}, secure=True).status_code == 400


def test_keyset_pages_walk_every_call_once(operator, calls):
    seen: list[int] = []
    params: dict[str, str] = {"size": "3"}
    for _ in range(5):
        page = operator.get("/ledger/", params, secure=True)
        seen += [e.pk for e in page.context["rows"]]
        if not page.context["next_before"]:
            break
        params["before"] = str(page.context["next_before"])
    assert seen == sorted(LedgerEntry.objects.values_list("pk", flat=True), reverse=True)


def test_calls_are_paged_newest_first_by_time_then_id(operator, calls):
    """The list's order is the calls' times, not their ids (a call written later may have
    started earlier), and calls of the same instant are ordered by id, each shown once."""
    ids = list(LedgerEntry.objects.order_by("pk").values_list("pk", flat=True))
    earliest = LedgerEntry.objects.order_by("created_at").values_list("created_at", flat=True)[0]
    # The newest id is the oldest call; the two before it share one instant.
    LedgerEntry.objects.filter(pk=ids[-1]).update(created_at=earliest - timedelta(minutes=5))
    LedgerEntry.objects.filter(pk__in=ids[-3:-1]).update(created_at=earliest - timedelta(minutes=1))
    expected = list(LedgerEntry.objects.order_by("-created_at", "-pk").values_list("pk", flat=True))
    assert expected != sorted(ids, reverse=True)
    seen: list[int] = []
    params: dict[str, str] = {"size": "1"}
    for _ in range(len(ids) + 1):
        page = operator.get("/ledger/", params, secure=True)
        seen += [e.pk for e in page.context["rows"]]
        if not page.context["next_before"]:
            break
        params["before"] = str(page.context["next_before"])
    assert seen == expected


def test_a_cursor_that_is_not_one_of_the_tenants_calls_is_a_404(
    django_user_model, other_tenant, operator, calls
):
    them = signed_in(make_user(django_user_model, "them", other_tenant, "operator"))
    theirs_to_see = LedgerEntry.objects.order_by("pk").first()
    assert theirs_to_see is not None
    assert operator.get("/ledger/", {"before": theirs_to_see.pk}, secure=True).status_code == 200
    assert them.get("/ledger/", {"before": theirs_to_see.pk}, secure=True).status_code == 404


def test_runs_are_searchable_and_link_to_their_timeline(operator, calls):
    page = operator.get("/ledger/runs/", secure=True)
    assert [r.run_id for r in page.context["rows"]] == ["run-2", "run-1"]
    only = operator.get("/ledger/runs/", {"run": "run-1"}, secure=True)
    assert [r.run_id for r in only.context["rows"]] == ["run-1"]
    run = Run.objects.get(run_id="run-1")
    assert f'href="/ledger/runs/{run.pk}/"' in only.content.decode()


def test_a_runs_timeline_shows_every_decision_and_dedup_hit(operator, calls):
    run = Run.objects.get(run_id="run-1")
    page = operator.get(f"/ledger/runs/{run.pk}/", secure=True)
    assert page.status_code == 200
    assert [e.decision for e in page.context["entries"]] == [
        "execute",
        "recorded_result",
        "recorded_result",
    ]
    assert page.context["dedup_hits"] == 2
    assert "2 dedup hits" in page.content.decode()


def test_another_tenants_run_is_a_404_and_their_calls_are_not_listed(
    django_user_model, other_tenant, calls
):
    them = signed_in(make_user(django_user_model, "them", other_tenant, "operator"))
    run = Run.objects.get(run_id="run-1")
    assert them.get(f"/ledger/runs/{run.pk}/", secure=True).status_code == 404
    assert them.get("/ledger/", secure=True).context["rows"] == []
    assert them.get("/ledger/runs/", secure=True).context["rows"] == []


def test_the_explorer_needs_a_console_role(django_user_model, tenant, calls):
    nobody = signed_in(make_user(django_user_model, "nobody", tenant))
    assert nobody.get("/ledger/", secure=True).status_code == 403
    assert nobody.get("/ledger/runs/", secure=True).status_code == 403
    assert nobody.post("/ledger/", secure=True).status_code == 405


@pytest.mark.parametrize("path", ["/ledger/", "/ledger/runs/"])
def test_query_count_does_not_grow_with_page_size(operator, tenant, path):
    api = client_for(tenant)
    for n in range(12):
        api.start_run(f"run-{n}")
        api.post(
            "/calls",
            {"run_id": f"run-{n}", "step_id": "s", "tool": "read_file", "input": {"n": n}},
        )
    counts = []
    for size in ("2", "10"):
        with CaptureQueriesContext(connection) as queries:
            response = operator.get(path, {"size": size}, secure=True)
        assert len(response.context["rows"]) == int(size)
        counts.append(len(queries))
    assert counts[0] == counts[1] <= 10


def test_run_timeline_query_count_does_not_grow_with_calls(operator, tenant):
    api = client_for(tenant)
    api.start_run("run-1")
    run = Run.objects.get()
    counts = []
    for batch in (2, 10):
        for n in range(batch):
            api.call("read_file", {"n": n, "batch": batch}, step_id=f"s{n}")
        with CaptureQueriesContext(connection) as queries:
            operator.get(f"/ledger/runs/{run.pk}/", secure=True)
        counts.append(len(queries))
    assert counts[0] == counts[1] <= 10


def test_a_long_runs_timeline_is_paged_in_order(operator, tenant, monkeypatch):
    from console import explorer

    monkeypatch.setattr(explorer, "TIMELINE_PAGE", 2)
    api = client_for(tenant)
    api.start_run("run-1")
    for n in range(5):
        api.call("read_file", {"n": n}, step_id=f"s{n}")
    run = Run.objects.get()
    seen: list[int] = []
    params: dict[str, str] = {}
    for _ in range(4):
        page = operator.get(f"/ledger/runs/{run.pk}/", params, secure=True)
        seen += [e.pk for e in page.context["entries"]]
        if not page.context["next_after"]:
            break
        params = {"after": str(page.context["next_after"])}
    assert seen == list(
        LedgerEntry.objects.order_by("created_at", "pk").values_list("pk", flat=True)
    )
    assert operator.get(f"/ledger/runs/{run.pk}/", {"after": "x"}, secure=True).status_code == 404


def test_a_runs_timeline_gives_each_time_with_its_zone(operator, tenant):
    api = client_for(tenant)
    api.start_run("run-1")
    api.call("read_file", {"n": 1})
    run = Run.objects.get()
    html = operator.get(f"/ledger/runs/{run.pk}/", secure=True).content.decode()
    times = re.findall(r'<div class="when mono">([^<]*)</div>', html)
    assert times and all(re.fullmatch(r"\d\d:\d\d:\d\d\.\d{3} UTC", t) for t in times), times
