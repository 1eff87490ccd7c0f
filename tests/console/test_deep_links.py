"""Every id the console shows links to its object's page (for the roles that open it), and an
id pasted from a log opens its object: the API's call id in the call page's URL, any whole id
(call, run, key) at ``/ledger/find`` (every other kind: tests/console/test_search_box.py),
and a whole call id in the ledger's search. Other tenants' ids are in
tests/test_tenant_scope.py."""

from __future__ import annotations

from typing import Any

import pytest

from console.models import SecurityEvent
from ledger.models import AuditEvent, LedgerEntry, Run
from tests.api.conftest import client_for
from tests.console.conftest import make_shadow_pair, make_user, signed_in

pytestmark = pytest.mark.django_db


@pytest.fixture
def orders(tenant) -> list[dict[str, Any]]:
    """Two orders in one run, the second with a key far longer than a table cell."""
    api = client_for(tenant)
    api.start_run("run-links")
    return [
        api.call(
            "create_order", {"cart": n}, run_id="run-links", step_id=f"s{n}", business_object_id=b
        ).json()
        for n, b in ((1, "cart-1"), (2, "cart-" + "x" * 120))
    ]


def _operator(django_user_model, tenant) -> Any:
    return signed_in(make_user(django_user_model, "op", tenant, "operator"))


def test_the_run_page_links_each_call_and_its_key(django_user_model, tenant, orders) -> None:
    run = Run.objects.get(run_id="run-links")
    html = _operator(django_user_model, tenant).get(f"/ledger/runs/{run.pk}/").content.decode()
    for order in orders:
        entry = LedgerEntry.objects.get(call_id=order["call_id"])
        assert f'href="/ledger/calls/{entry.pk}/">{entry.call_id}</a>' in html
        key = order["idempotency_key"]
        assert f'href="/ledger/records/{entry.record_id}/" title="{key}">{key}</a>' in html
        assert f'data-copy="{key}"' in html  # the whole key, on its copy button


def test_a_shadow_runs_page_links_both_runs(django_user_model, tenant) -> None:
    make_shadow_pair(tenant, live_id="live-7", shadow_id="shadow-7")
    shadow, live = Run.objects.get(run_id="shadow-7"), Run.objects.get(run_id="live-7")
    manager = signed_in(make_user(django_user_model, "ma", tenant, "manager"))
    html = manager.get(f"/shadow/{shadow.pk}/").content.decode()
    heading = html[html.index("<h1>") : html.index("</h1>")]
    assert f'href="/ledger/runs/{shadow.pk}/"' in heading
    assert f'href="/ledger/runs/{live.pk}/"' in html


def test_the_compensation_pages_link_the_key_and_the_run(
    django_user_model, tenant, ordered
) -> None:
    client = _operator(django_user_model, tenant)
    html = client.get(f"/compensations/records/{ordered.pk}/").content.decode()
    assert f'href="/ledger/records/{ordered.pk}/" title="{ordered.key}"' in html
    assert f'href="/ledger/runs/{ordered.run_id}/"' in html
    html = client.get(f"/compensations/runs/{ordered.run_id}/").content.decode()
    heading = html[html.index("<h1>") : html.index("</h1>")]
    assert f'href="/ledger/runs/{ordered.run_id}/"' in heading
    assert f'data-copy="{ordered.key}"' in html


def test_the_apis_call_id_opens_the_calls_page(django_user_model, tenant, orders) -> None:
    client = _operator(django_user_model, tenant)
    entry = LedgerEntry.objects.get(call_id=orders[0]["call_id"])
    response = client.get(f"/ledger/calls/{orders[0]['call_id']}/")
    assert response.status_code == 302 and response.url == f"/ledger/calls/{entry.pk}/"
    missing = "00000000-0000-4000-8000-000000000000"
    assert client.get(f"/ledger/calls/{missing}/").status_code == 404


def test_any_whole_id_from_a_log_opens_its_object(django_user_model, tenant, orders) -> None:
    client = _operator(django_user_model, tenant)
    entry = LedgerEntry.objects.get(call_id=orders[1]["call_id"])
    found = {
        orders[1]["call_id"]: f"/ledger/calls/{entry.pk}/",
        orders[1]["call_id"].upper(): f"/ledger/calls/{entry.pk}/",
        "run-links": f"/ledger/runs/{entry.run_id}/",
        orders[1]["idempotency_key"]: f"/ledger/records/{entry.record_id}/",
    }
    for text, page in found.items():
        response = client.get("/ledger/find", {"id": f" {text} "})
        assert response.status_code == 302 and response.url == page, text
    for text in ("nothing-of-the-kind", "00000000-0000-4000-8000-000000000000"):
        assert client.get("/ledger/find", {"id": text}).status_code == 404, text


def test_another_tenants_ids_are_not_found(django_user_model, tenant, other_tenant, orders):
    them = signed_in(make_user(django_user_model, "them", other_tenant, "operator"))
    call_id = orders[0]["call_id"]
    assert them.get(f"/ledger/calls/{call_id}/").status_code == 404
    for text in (call_id, "run-links", orders[0]["idempotency_key"]):
        assert them.get("/ledger/find", {"id": text}).status_code == 404, text
    # A probe for another tenant's call is kept where the prober's tenant cannot read it.
    assert not AuditEvent.objects.filter(action="console.denied", target_id=call_id).exists()
    probes = SecurityEvent.objects.filter(actor="them", target_id=call_id)
    assert [e.reason for e in probes] == ["tenant", "tenant"]


def test_the_search_goes_straight_to_a_call_named_by_its_whole_id(
    django_user_model, tenant, orders
) -> None:
    client = _operator(django_user_model, tenant)
    entry = LedgerEntry.objects.get(call_id=orders[0]["call_id"])
    response = client.get("/ledger/", {"call": orders[0]["call_id"].upper()})
    assert response.status_code == 302 and response.url == f"/ledger/calls/{entry.pk}/"
    # A start of an id lists what it matches; a whole id that other filters rule out, nothing.
    assert client.get("/ledger/", {"call": orders[0]["call_id"][:8]}).status_code == 200
    ruled_out = client.get("/ledger/", {"call": orders[0]["call_id"], "tool": "send_email"})
    assert ruled_out.status_code == 200 and b"No call matches" in ruled_out.content
    csv = client.get("/ledger/", {"call": orders[0]["call_id"], "format": "csv"})
    assert csv.status_code == 200
    assert orders[0]["call_id"] in b"".join(csv.streaming_content).decode()


def test_keys_are_cut_to_one_line_whole_on_hover_and_copy(django_user_model, tenant, orders):
    entry = LedgerEntry.objects.get(call_id=orders[1]["call_id"])
    key = orders[1]["idempotency_key"]
    page = _operator(django_user_model, tenant).get(f"/ledger/calls/{entry.pk}/").content.decode()
    assert f'<a class="clip key" href="/ledger/records/{entry.record_id}/" title="{key}">' in page
    assert f'data-copy="{key}"' in page
