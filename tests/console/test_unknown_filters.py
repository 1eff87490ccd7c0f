"""The unknown-outcome queue's filters (tool, kind, combination, age), all kept in the URL."""

from __future__ import annotations

import pytest

from ledger.domain import WRITE_CONFLICT_ESCALATION, EscalationKind
from ledger.models import AuditEvent, IdempotencyRecord
from ledger.records import escalation
from reconcile.operator_actions import escalate
from tests.api.conftest import client_for
from tests.console.conftest import make_user, signed_in

pytestmark = pytest.mark.django_db


@pytest.fixture
def queue(tenant) -> dict[str, IdempotencyRecord]:
    """Three unknown calls: an order looked up automatically, an escalated email and a write
    conflict."""
    api = client_for(tenant)
    api.start_run()
    made = {}
    for name, tool, obj in (
        ("order", "create_order", "c1"),
        ("email", "send_email", "m1"),
        ("write", "create_issue", "i1"),
    ):
        call = api.call(tool, {"x": obj}, business_object_id=obj).json()
        api.post(f"/calls/{call['call_id']}/complete", {"fencing_token": 1, "outcome": "uncertain"})
        made[name] = IdempotencyRecord.objects.get(key=call["idempotency_key"])
    escalate(record=made["email"], actor="olga", reason="customer says no email came")
    escalation.escalate(
        made["write"],
        EscalationKind.WRITE_CONFLICT,
        WRITE_CONFLICT_ESCALATION,
        actor="system",
        source=AuditEvent.Source.WORKER,
    )
    return made


def _shown(client, query: str) -> set[int]:
    response = client.get(f"/unknown/?{query}", secure=True)
    assert response.status_code == 200, response.content[:500]
    return {record.pk for record in response.context["records"]}


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("", {"order", "email", "write"}),
        ("tool=create_order", {"order"}),
        ("kind=write_conflict", {"write"}),
        ("kind=escalated", {"email", "write"}),
        ("kind=automatic", {"order"}),
        ("kind=escalated&tool=send_email", {"email"}),
        ("older_than=1h", set()),
    ],
)
def test_each_filter_narrows_the_queue(django_user_model, tenant, queue, query, expected):
    client = signed_in(make_user(django_user_model, "olga", tenant, "operator"))
    assert _shown(client, query) == {queue[name].pk for name in expected}


def test_a_write_conflict_is_known_by_its_kind_not_its_words(django_user_model, tenant, queue):
    """An operator who escalates with the conflict's words escalates an operator's case."""
    escalate(record=queue["order"], actor="olga", reason=WRITE_CONFLICT_ESCALATION)
    client = signed_in(make_user(django_user_model, "olga", tenant, "operator"))
    assert _shown(client, "kind=write_conflict") == {queue["write"].pk}
    assert _shown(client, "kind=escalated") == {queue[name].pk for name in queue}


def test_the_combination_filter_offers_only_the_tenants_combinations(
    django_user_model, tenant, queue
):
    client = signed_in(make_user(django_user_model, "olga", tenant, "operator"))
    response = client.get("/unknown/?combination=999999", secure=True)
    assert response.status_code == 400  # not one of this tenant's: an error, no query
    assert response.context["records"] == []


def test_a_bad_kind_is_an_error_shown_on_the_form(django_user_model, tenant, queue):
    client = signed_in(make_user(django_user_model, "olga", tenant, "operator"))
    response = client.get("/unknown/?kind=everything", secure=True)
    assert response.status_code == 400
    assert 'class="field-error"' in response.content.decode()


def test_the_next_page_link_keeps_the_filters(django_user_model, tenant, queue, monkeypatch):
    monkeypatch.setattr("console.unknown.PAGE", 1)
    client = signed_in(make_user(django_user_model, "olga", tenant, "operator"))
    page = client.get("/unknown/?kind=escalated", secure=True).content.decode()
    assert f'href="?kind=escalated&amp;after={queue["email"].pk}"' in page


@pytest.mark.parametrize(
    ("fragment", "expected"),
    [("create", {"order", "write"}), ("_email", {"email"}), ("order", {"order"}), ("nope", set())],
)
def test_the_tool_filter_matches_any_part_of_the_name_as_the_ledgers_does(
    django_user_model, tenant, queue, fragment, expected
):
    client = signed_in(make_user(django_user_model, "olga", tenant, "operator"))
    assert _shown(client, f"tool={fragment}") == {queue[name].pk for name in expected}
    ledger = client.get("/ledger/", {"tool": fragment}, secure=True).context["rows"]
    assert {e.record_id for e in ledger} == {queue[name].pk for name in expected}


@pytest.mark.parametrize("kind", list(EscalationKind))
def test_the_kind_filter_finds_each_escalation_kind(django_user_model, tenant, queue, kind):
    escalation.escalate(
        queue["order"], kind, f"because {kind.value}", actor="x", source=AuditEvent.Source.WORKER
    )
    client = signed_in(make_user(django_user_model, "olga", tenant, "operator"))
    same = {"order"} | ({"write"} if kind == EscalationKind.WRITE_CONFLICT else set())
    same |= {"email"} if kind == EscalationKind.OPERATOR else set()
    assert _shown(client, f"kind={kind.value}") == {queue[name].pk for name in same}


def test_the_kinds_are_labelled_in_the_users_language(django_user_model, tenant, queue):
    client = signed_in(make_user(django_user_model, "olga", tenant, "operator"))
    english = client.get("/unknown/", secure=True).content.decode()
    assert '<option value="no_check">cannot be looked up</option>' in english
    client.post("/language", {"language": "zh-hans", "next": "/"}, secure=True)
    chinese = client.get("/unknown/", secure=True).content.decode()
    assert '<option value="no_check">无法查询</option>' in chinese
    assert '<option value="write_conflict">写入冲突</option>' in chinese


def test_a_row_shows_what_triage_needs(django_user_model, tenant, queue):
    """Combination, escalation kind and reason (whole on hover), and the input if short."""
    client = signed_in(make_user(django_user_model, "olga", tenant, "operator"))
    response = client.get("/unknown/", secure=True)
    html = response.content.decode()
    rows = {row.record.pk: row for row in response.context["rows"]}
    email = rows[queue["email"].pk]
    assert email.escalation == "escalated by an operator"
    assert email.input == '{"x":"m1"}'
    assert rows[queue["order"].pk].escalation == ""  # looked up automatically
    reason = "operator: customer says no email came"  # its owner and its next step, the reason
    assert f'title="{reason}">{reason}</span>' in html
    assert ">escalated by an operator</span>" in html
    assert 'title="{&quot;x&quot;:&quot;m1&quot;}"' in html


def test_a_long_input_is_left_to_the_calls_page(django_user_model, tenant):
    api = client_for(tenant)
    api.start_run()
    call = api.call("create_order", {"lines": ["x" * 40] * 10}, business_object_id="c9").json()
    api.post(f"/calls/{call['call_id']}/complete", {"fencing_token": 1, "outcome": "uncertain"})
    client = signed_in(make_user(django_user_model, "olga", tenant, "operator"))
    [row] = client.get("/unknown/", secure=True).context["rows"]
    assert row.input == ""
