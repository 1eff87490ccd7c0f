"""The search box in the top bar of every console page: any id pasted whole (or a key in part)
finds what it names, in the member's own tenant only. One match their role opens is its page;
several are listed with their kind; none is a page that says what was searched. The reading of
the text itself is pure (``console.search.read_query``) and tested as a table."""

from __future__ import annotations

import re
import uuid
from typing import Any
from urllib.parse import quote, quote_plus

import pytest
from django.db import connection
from django.urls import reverse
from django.utils.html import escape

from console.search import MAX_QUERY, InvalidQuery, read_query, recorded_value_matches
from ledger.models import AuditEvent, IdempotencyRecord, LedgerEntry, Run
from tests.api.conftest import ApiClient, client_for
from tests.console.conftest import make_pending, make_user, signed_in
from tests.console.test_access_matrix import ROUTES, _url
from tests.console.test_access_matrix import objects as objects  # the fixture, re-exported

FIND = "/ledger/find"
CALL_ID = "9f3a2c71-5d0e-4b8a-9c1f-2e6d7a8b9c0d"

# --- reading the text (pure) -------------------------------------------------------------

NAMES = {"审批": "approval", "审计事件": "audit_event"}


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (CALL_ID, {"call_id": uuid.UUID(CALL_ID), "call_start": None, "number": None}),
        (CALL_ID.upper(), {"call_id": uuid.UUID(CALL_ID), "call_start": None}),
        # 32 hexadecimal digits are a uuid too (and a run id, as the bench's are).
        (CALL_ID.replace("-", ""), {"call_id": uuid.UUID(CALL_ID), "call_start": None}),
        ("9F3A2C71", {"call_id": None, "call_start": "9f3a2c71"}),
        ("9f3a2c71-5d0e", {"call_id": None, "call_start": "9f3a2c71-5d0e"}),
        ("9f3a2c7", {"call_id": None, "call_start": None}),  # fewer than 8: too many calls
        ("cart-42", {"call_id": None, "call_start": None, "number": None, "fragment": True}),
        ("42", {"number": 42, "numbered": {"approval", "audit_event"}, "fragment": False}),
        ("#42", {"number": 42, "numbered": {"approval", "audit_event"}}),
        ("approval 12", {"number": 12, "numbered": {"approval"}}),
        ("Approval #12", {"number": 12, "numbered": {"approval"}}),
        ("approvalrequest:12", {"number": 12, "numbered": {"approval"}}),
        ("审批 #12", {"number": 12, "numbered": {"approval"}}),
        ("audit event 7", {"number": 7, "numbered": {"audit_event"}}),
        ("Audit event #7", {"number": 7, "numbered": {"audit_event"}}),
        ("auditevent:7", {"number": 7, "numbered": {"audit_event"}}),
        ("审计事件 #7", {"number": 7, "numbered": {"audit_event"}}),
        ("cart 42", {"number": None, "numbered": set()}),
        ("9" * 19, {"number": None}),  # past any id a bigint holds
        ("ord_8f3a", {"number": None, "call_start": None, "fragment": True}),
        ("  ord_8f3a \n", {"text": "ord_8f3a"}),
    ],
)
def test_read_query(text: str, expected: dict[str, Any]) -> None:
    query = read_query(text, names=NAMES)
    for field, value in expected.items():
        assert getattr(query, field) == value, (text, field)


@pytest.mark.parametrize("text", ["", "   ", "x" * (MAX_QUERY + 1), "ord\x00_1", "a\tb"])
def test_read_query_refuses_what_is_no_id(text: str) -> None:
    with pytest.raises(InvalidQuery):
        read_query(text, names=NAMES)


# --- the find page ---------------------------------------------------------------------


@pytest.fixture
def api(tenant) -> ApiClient:
    return client_for(tenant)


@pytest.fixture
def order(api) -> dict[str, Any]:
    """An order whose recorded result holds the downstream's order id, and a key of its own."""
    api.start_run("run-orders")
    call = api.call(
        "create_order", {"cart": 42}, run_id="run-orders", business_object_id="cart-42"
    ).json()
    done = api.post(
        f"/calls/{call['call_id']}/complete",
        {
            "fencing_token": 1,
            "outcome": "succeeded",
            "result": {"order": {"id": "ord_8f3a", "lines": [{"sku": "sku_1"}]}, "state": "new"},
        },
    )
    assert done.status_code == 200, done.content
    return call


def _role(django_user_model, tenant, role: str, name: str = "") -> Any:
    return signed_in(make_user(django_user_model, name or f"u-{role or 'none'}", tenant, role))


@pytest.fixture
def operator(django_user_model, tenant):
    return _role(django_user_model, tenant, "operator")


def _record_page(call: dict[str, Any]) -> str:
    return f"/ledger/records/{IdempotencyRecord.objects.get(key=call['idempotency_key']).pk}/"


def _found(response) -> str:
    assert response.status_code == 302, (response.status_code, response.content[:500])
    return response.url


def _listed(response) -> list[tuple[str, str]]:
    """Each match the page lists: (kind, link or "")."""
    assert response.status_code == 200, (response.status_code, response.content[:500])
    return [(match.kind, match.url) for match in response.context["matches"]]


def test_a_whole_run_id_finds_the_run_not_its_actions_keys(operator, api, order) -> None:
    run = Run.objects.get(run_id="run-orders")
    # Every key of the run's actions holds the run id; the run is what it names.
    assert _found(operator.get(FIND, {"id": "run-orders"})) == f"/ledger/runs/{run.pk}/"


#: Fixed, so every xdist worker collects the same tests.
RUN_UUID = "0b5e8f3a-6c1d-4e2f-9a7b-3c4d5e6f7a8b"


@pytest.mark.parametrize("run_id", [RUN_UUID, RUN_UUID.replace("-", "")], ids=["dashed", "hex"])
def test_a_run_id_shaped_like_a_call_id_finds_the_run(operator, api, run_id) -> None:
    api.start_run(run_id)
    api.call("read_file", {"path": "a"}, run_id=run_id, step_id="r")
    run = Run.objects.get(run_id=run_id)
    assert _found(operator.get(FIND, {"id": run_id})) == f"/ledger/runs/{run.pk}/"


def test_a_whole_call_id_finds_the_call(operator, order) -> None:
    entry = LedgerEntry.objects.get(call_id=order["call_id"])
    for text in (order["call_id"], order["call_id"].upper(), f"  {order['call_id']} "):
        assert _found(operator.get(FIND, {"id": text})) == f"/ledger/calls/{entry.pk}/"


def test_a_run_id_that_is_also_the_start_of_a_call_id_lists_both(operator, api, order) -> None:
    start = order["call_id"][:8]
    api.start_run(start)
    api.call("read_file", {"path": "a"}, run_id=start, step_id="r")
    run = Run.objects.get(run_id=start)
    entry = LedgerEntry.objects.get(call_id=order["call_id"])
    listed = _listed(operator.get(FIND, {"id": start}))
    assert ("run", f"/ledger/runs/{run.pk}/") in listed
    assert ("call_start", f"/ledger/calls/{entry.pk}/") in listed


def test_part_of_a_key_lists_each_action_whose_key_holds_it(operator, api) -> None:
    api.start_run("run-carts")
    keys = {}
    for cart in ("cart-42", "cart-420", "cart-7"):
        call = api.call(
            "create_order",
            {"cart": cart},
            run_id="run-carts",
            step_id=cart,
            business_object_id=cart,
        ).json()
        keys[cart] = call
    response = operator.get(FIND, {"id": "cart-42"})
    listed = _listed(response)
    assert sorted(listed) == sorted(
        ("key_part", _record_page(keys[cart])) for cart in ("cart-42", "cart-420")
    )
    html = response.content.decode()
    assert "Action (its key holds this)" in html
    assert 'href="/ledger/?key=cart-42"' in html  # every call with it, in the ledger


def test_a_whole_key_finds_its_action(operator, order) -> None:
    assert _found(operator.get(FIND, {"id": order["idempotency_key"]})) == _record_page(order)


def test_an_order_id_inside_a_recorded_result_finds_the_action(operator, order) -> None:
    for text in ("ord_8f3a", "sku_1"):  # at any depth, in objects and arrays
        assert _found(operator.get(FIND, {"id": text})) == _record_page(order), text


def test_a_name_in_a_result_is_not_a_value_in_it(operator, order) -> None:
    """Only the result's string values are searched: its keys (``order``, ``state``) are the
    names every result of the tool has."""
    assert operator.get(FIND, {"id": "state"}).status_code == 404


def test_an_id_in_a_recorded_error_or_a_reports_evidence_finds_the_action(operator, api) -> None:
    api.start_run("run-pay")
    failed = api.call("create_order", {"cart": 5}, run_id="run-pay", step_id="c1").json()
    api.post(
        f"/calls/{failed['call_id']}/complete",
        {"fencing_token": 1, "outcome": "failed", "error": {"code": "DUPLICATE_ch_77"}},
    )
    lost = api.call("create_order", {"cart": 6}, run_id="run-pay", step_id="c2").json()
    api.post(
        f"/calls/{lost['call_id']}/complete",
        {"fencing_token": 1, "outcome": "uncertain", "evidence": {"request": "req_5150"}},
    )
    assert _found(operator.get(FIND, {"id": "DUPLICATE_ch_77"})) == _record_page(failed)
    assert _found(operator.get(FIND, {"id": "req_5150"})) == _record_page(lost)


def test_an_approval_is_found_by_its_number(django_user_model, tenant) -> None:
    approval = make_pending(tenant)
    approver = _role(django_user_model, tenant, "approver")
    page = f"/approvals/{approval.pk}/"
    for text in (f"approval {approval.pk}", f"Approval #{approval.pk}"):
        assert _found(approver.get(FIND, {"id": text})) == page, text
    # A bare number is an approval's or an audit event's: the approval, alone or listed.
    bare = approver.get(FIND, {"id": f"#{approval.pk}"})
    if AuditEvent.objects.filter(tenant=tenant, pk=approval.pk).exists():
        assert ("approval", page) in _listed(bare)
    else:
        assert _found(bare) == page


def test_an_approval_found_by_an_operator_links_to_its_action(
    django_user_model, tenant, operator
) -> None:
    approval = make_pending(tenant)
    listed = _listed(operator.get(FIND, {"id": f"approval {approval.pk}"}))
    assert listed == [("approval", f"/ledger/records/{approval.record_id}/")]


def test_an_audit_event_is_found_by_its_number(operator, order, tenant) -> None:
    event = AuditEvent.objects.filter(tenant=tenant).order_by("-pk").first()
    for text in (f"audit event {event.pk}", f"Audit event #{event.pk}"):
        assert _found(operator.get(FIND, {"id": text})) == f"/audit/{event.pk}/", text


def test_every_member_may_search_and_links_only_to_pages_their_role_opens(
    django_user_model, tenant, order
) -> None:
    member = _role(django_user_model, tenant, "")  # a member without a role
    response = member.get(FIND, {"id": order["call_id"]})
    assert _listed(response) == [("call", "")]
    assert "/ledger/calls/" not in response.content.decode()


def _page_for(response, text: str) -> str:
    """The page without the text searched (as typed, and in its URL) and what differs
    between any two requests."""
    page = response.content.decode()
    for written in (quote_plus(text), quote(text), escape(text)):
        page = page.replace(written, "TEXT")
    return re.sub(r"(csrfmiddlewaretoken\" value=|X-CSRFToken\": )\"[^\"]+\"", "", page)


def test_another_tenants_ids_are_answered_as_a_missing_id(
    django_user_model, tenant, other_tenant, api, order
) -> None:
    approval = make_pending(tenant)
    event = AuditEvent.objects.filter(tenant=tenant).order_by("-pk").first()
    them = _role(django_user_model, other_tenant, "admin", "them")
    theirs = {
        "call": order["call_id"],
        "run": "run-orders",
        "key": order["idempotency_key"],
        "key part": "cart-42",
        "order": "ord_8f3a",
        "approval": f"approval {approval.pk}",
        "event": f"audit event {event.pk}",
    }
    missing = _page_for(them.get(FIND, {"id": "no-such-id"}), "no-such-id")
    for kind, text in theirs.items():
        response = them.get(FIND, {"id": text})
        assert response.status_code == 404, kind
        assert _page_for(response, text) == missing, kind


def test_nothing_matches_says_what_was_searched_with_the_text_escaped(operator, order) -> None:
    text = "ord_<script>alert(1)</script>"
    response = operator.get(FIND, {"id": text})
    html = response.content.decode()
    assert response.status_code == 404
    assert "<script>alert(1)" not in html and "ord_&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "Nothing in Acme matches" in html
    for searched in ("call ids", "run ids", "idempotency keys", "approvals", "audit events"):
        assert searched in html, searched
    assert "recorded results" in html
    # The box keeps the text, to correct it.
    assert 'value="ord_&lt;script&gt;alert(1)&lt;/script&gt;"' in html


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("", "Type or paste an id"),
        ("   ", "Type or paste an id"),
        ("x" * (MAX_QUERY + 1), "at most 1,024 characters"),
        ("ord\x00_1", "no control characters"),
    ],
)
def test_an_empty_overlong_or_control_character_query_is_a_clear_error(
    operator, text, says
) -> None:
    response = operator.get(FIND, {"id": text})
    assert response.status_code == 400
    assert says in response.content.decode()
    assert operator.get(FIND).status_code == 400  # no parameter at all


def test_the_find_page_reads_a_bounded_number_of_statements(
    operator, api, django_assert_max_num_queries
) -> None:
    api.start_run("run-many")
    for n in range(30):
        api.call(
            "create_order",
            {"n": n},
            run_id="run-many",
            step_id=f"s{n}",
            business_object_id=f"cart-9{n:02d}",
        )
    with django_assert_max_num_queries(16):
        response = operator.get(FIND, {"id": "cart-9"})
    assert len(response.context["matches"]) == 20 and response.context["more"] == {"key_part"}


def test_the_recorded_values_are_searched_on_their_indexes(tenant, order) -> None:
    """The searches' own statements can read the indexes of migration 0027 (the planner uses
    an index only for its very expression). On a test table of a few rows it prefers any
    index that leads with the tenant, so the others are dropped in the test's transaction
    (rolled back after it); which index wins at 1,000,000 records is measured by make
    bench-console."""
    with connection.cursor() as cursor:
        cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")  # no deferred check pending
        for table, kept in (
            ("ledger_idempotencyrecord", "record_values_idx"),
            ("ledger_ledgerentry", "entry_evidence_values_idx"),
        ):
            cursor.execute(
                "SELECT i.indexname, c.conname FROM pg_indexes i LEFT JOIN pg_constraint c "
                "ON c.conname = i.indexname WHERE i.tablename = %s AND i.indexname <> %s "
                "AND i.indexname NOT LIKE '%%_pkey'",
                [table, kept],
            )
            for name, constraint in cursor.fetchall():
                if constraint:
                    cursor.execute(f'ALTER TABLE {table} DROP CONSTRAINT "{constraint}"')
                else:
                    cursor.execute(f'DROP INDEX "{name}"')
            cursor.execute(f"ANALYZE {table}")
        cursor.execute("SET LOCAL enable_seqscan = off")
    records, entries = recorded_value_matches(tenant, "ord_8f3a")
    plan = records.explain()
    assert "record_values_idx" in plan and "Index Cond" in plan, plan
    assert "entry_evidence_values_idx" in entries.explain()


# --- the box on every page -------------------------------------------------------------

BOX = re.compile(
    r'<form [^>]*role="search"[^>]*action="/ledger/find"[^>]*>.*?<input [^>]*name="id"', re.S
)


def test_the_search_box_is_on_every_console_page(django_user_model, tenant, objects) -> None:
    admin = _role(django_user_model, tenant, "admin")
    seen = 0
    for name, needs, methods, _allowed in ROUTES:
        if "GET" not in methods:
            continue
        response = admin.get(_url(name, needs, objects), secure=True)
        if response.status_code != 200 or "text/html" not in response["Content-Type"]:
            continue
        assert BOX.search(response.content.decode()), name
        seen += 1
    assert seen >= 20
    # And on the pages that answer a refusal or a search. (A missing object's 404 is the same
    # bytes whoever asks, tests/console/test_security_log.py: no page with a form's token.)
    member = _role(django_user_model, tenant, "")
    for client, path in (
        (member, "/approvals/"),
        (admin, f"{FIND}?id=nothing-here"),
        (admin, f"{FIND}?id="),
    ):
        assert BOX.search(client.get(path, secure=True).content.decode()), path


def test_the_search_box_has_a_keyboard_shortcut_listed_in_the_help(operator) -> None:
    html = operator.get(reverse("console:home"), secure=True).content.decode()
    assert 'data-key="s"' in html
    assert "<kbd>s</kbd>" in html
