"""Tenant scope of every list: two tenants with rows of every kind, and every console list page
and API list endpoint, found from the URL configuration, shows each tenant its own rows and
never the other's, and so does every console list's CSV export (each list says whether it has
one). A new list is covered by default; a URL that is not a list has to be named in
``NOT_LISTS`` with the reason (``/metrics`` is a list too: a tenant's admin reads only their
tenants' series there). Every console page of one object (a ``pk`` in its URL) is a
404 for the other tenant's object, found the same way. The console's selectors are checked the
same way."""

from __future__ import annotations

import inspect
import re
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote_plus

import pytest
from django.apps import apps
from django.contrib.auth import get_user_model
from django.db import transaction
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver, resolve

from console import selectors
from console.api import api as ninja_api
from ledger import combinations, notifications
from ledger.combinations import rollouts
from ledger.models import ApiToken, ApprovalRequest, AuditEvent, IdempotencyRecord, Run, Tenant
from ledger.services import approval_policies, metrics
from ledger.services.approvals import decide
from tests.api.conftest import ApiClient, client_for
from tests.console.conftest import make_pending, make_shadow_pair, make_user, signed_in
from tests.factories import make_tenant, make_tool

pytestmark = pytest.mark.django_db

# Rare words, so that one on a page can only come from that tenant's rows.
SLUGS = ("ovenbird", "kingfisher")

# URLs without an object in their path that are not lists, each with the reason.
NOT_LISTS = {
    "healthz": "liveness probe; reads nothing",
    "readyz": "readiness probe: the store and the broker, no rows",
    "login": "sign-in form",
    "logout": "sign-out",
    "set_language": "Django's language switch (POST)",
    "console:switch_tenant": "switches the signed-in user's tenant (POST)",
    "console:set_language": "the console's language switch (POST)",
    "console:preferences": "the signed-in user's own settings: a form, no rows",
    "console:tools_import": "imports a tools/list document (POST)",
    "console:rollout_create": "starts a rollout plan (POST)",
    "api-v1:openapi-json": "the API's own schema",
    "api-v1:openapi-view": "the API's documentation page",
    "api-v1:api-root": "the API's index",
    "api-v1:record_by_key": "a look-up of one key, not a list: test_a_key_is_looked_up_per_tenant",
    "api-v1:preview": "one action's compensation by key: tests/api/test_compensations.py",
    "api-v1:get_compensation": "one action's compensation by key: tests/api/test_compensations.py",
    "console:tool_compensation": "declares a tool's compensation (POST)",
    "console:revoke_token": "revokes one token (POST)",
    "console:find": "a search for one id: test_an_id_is_searched_for_per_tenant",
}

# Lists that need a query to show anything: the parameters, from the tenant's own rows.
QUERIES = {
    "console:unknown_bulk": lambda rows: {"action": "lookup", "ids": [rows["unknown"]]},
}


def _walk(patterns: list[Any], prefix: str = "", namespace: str = "") -> Iterator[tuple]:
    for pattern in patterns:
        if isinstance(pattern, URLResolver):
            inner = f"{namespace}:{pattern.namespace}" if namespace else pattern.namespace or ""
            yield from _walk(pattern.url_patterns, prefix + str(pattern.pattern), inner)
        elif isinstance(pattern, URLPattern):
            name = f"{namespace}:{pattern.name}" if namespace else pattern.name
            yield prefix + str(pattern.pattern), name, pattern


def _api_methods() -> dict[str, set[str]]:
    """The HTTP methods of each API operation, by its URL name."""
    methods: dict[str, set[str]] = {}
    for _prefix, router in ninja_api._routers:
        for path_view in router.path_operations.values():
            for operation in path_view.operations:
                # django-ninja names an operation's URL after its view function.
                methods[f"api-v1:{operation.view_func.__name__}"] = set(operation.methods)
    return methods


def _lists() -> list[tuple[str, str]]:
    """(URL name, path) of every URL without an object in its path that answers GET, but
    the admin's."""
    api_methods = _api_methods()
    found = []
    for route, name, pattern in _walk(get_resolver().url_patterns):
        if route.startswith("admin/") or pattern.pattern.converters:
            continue
        if name in api_methods and "GET" not in api_methods[name]:
            continue  # a write: the API names each method of a path apart
        found.append((name, "/" + route))
    return found


LISTS = [(name, path) for name, path in _lists() if name not in NOT_LISTS]


def test_every_url_without_an_object_is_a_list_or_named_as_not_one() -> None:
    discovered = {name for name, _path in _lists()}
    assert set(NOT_LISTS) <= discovered, set(NOT_LISTS) - discovered
    assert {"console:unknown_calls", "console:approvals", "api-v1:list_tools"} <= {
        name for name, _path in LISTS
    }


def _combination(tenant: Tenant, label: str) -> Any:
    """A combination whose label (and data version) is ``label``."""
    return combinations.create_combination(
        tenant=tenant,
        label=label,
        actor="test",
        source="api",
        model="m",
        prompt="p",
        rules="r",
        tool_schema="t",
        data_version=label,
    )[0]


def _rows(tenant: Tenant) -> dict[str, Any]:
    """Rows of every kind for ``tenant``, each carrying ``<slug>_row`` where it has text."""
    marker = f"{tenant.slug}_row"
    combination = _combination(tenant, f"{marker}-combo")
    combinations.activate(tenant=tenant, combination_id=combination.pk, actor="t", source="api")
    make_tool(tenant, f"{marker}_tool")
    ApiToken.issue(tenant=tenant, name=f"{marker}_token")
    approval_policies.add_policy(
        tenant=tenant, actor="m", source="api", name=f"{marker}_policy", reason="r", tool="x"
    )
    api = client_for(tenant)
    api.start_run(f"{marker}-run", user_id=f"{marker}-user")
    unknown = api.call(
        "create_order",
        {"cart": marker},
        run_id=f"{marker}-run",
        business_object_id=f"{marker}-cart",
    ).json()
    api.post(f"/calls/{unknown['call_id']}/complete", {"fencing_token": 1, "outcome": "uncertain"})
    done = api.call(f"{marker}_tool", {"q": marker}, run_id=f"{marker}-run", step_id="s-2").json()
    api.post(
        f"/calls/{done['call_id']}/complete",
        {
            "fencing_token": 1,
            "outcome": "succeeded",
            "result": {"answer": marker, "order": f"ord-{marker}"},
        },
    )
    response = api.post(
        "/thresholds",
        {"metric": "uncertain_results", "above": 5, "email": f"{marker}@example.com"},
    )
    assert response.status_code == 201, response.content
    notifications.add_channel(
        tenant=tenant,
        actor="m",
        source="console",
        role="operator",
        tier=1,
        kind="email",
        target=f"oncall@{marker}.example",
    )
    make_shadow_pair(tenant, live_id=f"{marker}-live", shadow_id=f"{marker}-shadow")
    candidate = _combination(tenant, f"{marker}-rollout")
    rollouts.create_plan(
        tenant=tenant,
        candidate_id=candidate.pk,
        steps=[rollouts.StepSpec(1000), rollouts.StepSpec(10_000)],
        actor="test",
        source="api",
    )
    make_pending(tenant, path=f"{marker}.py", run_id=f"{marker}-write")
    # A decided approval too, so lists of past decisions have a row.
    decided = make_pending(tenant, path=f"{marker}-decided.py", run_id=f"{marker}-decided")
    boss = make_user_for(tenant, "boss")
    decide(approval=decided, user=boss, approve=False, reason=f"not now {marker}")
    return {
        "api": api,
        "marker": marker,
        "unknown": IdempotencyRecord.objects.get(key=unknown["idempotency_key"]).pk,
    }


def make_user_for(tenant: Tenant, name: str) -> Any:
    return make_user(get_user_model(), f"{name}-{tenant.slug}", tenant, "approver")


@pytest.fixture(scope="module")
def tenants(django_db_setup: None, django_db_blocker: Any) -> Iterator[dict[str, dict[str, Any]]]:
    """Both tenants' rows, built once for the module in a transaction rolled back after it
    (each test runs in a savepoint inside it)."""
    with django_db_blocker.unblock(), transaction.atomic():
        found = {}
        for slug in SLUGS:
            tenant = make_tenant(slug)
            rows = _rows(tenant)
            user = make_user(get_user_model(), f"staff-{slug}", tenant, "admin")
            rows["console"] = signed_in(user)
            found[slug] = rows
        metrics.roll_up()
        yield found
        transaction.set_rollback(True)


def _get(rows: dict[str, Any], name: str, path: str) -> str:
    params = QUERIES[name](rows) if name in QUERIES else {}
    if name.startswith("api-v1:"):
        api: ApiClient = rows["api"]
        response = api.client.get(path, params, headers=api._headers(), secure=True)
    else:
        client: Client = rows["console"]
        response = client.get(path, params, secure=True)
    assert response.status_code == 200, (name, response.status_code)
    return response.content.decode()


# Lists that show numbers, not names: each tenant's page is the same before and after the
# other tenant records calls of its own.
COUNTS_ONLY = {"console:home", "api-v1:metrics_series"}


@pytest.mark.parametrize(("name", "path"), LISTS, ids=[name for name, _path in LISTS])
def test_each_tenant_sees_only_its_own_rows(tenants, name: str, path: str) -> None:
    for own, other in (SLUGS, SLUGS[::-1]):
        page = _get(tenants[own], name, path)
        assert other not in page, f"{name} shows {own} a row of {other}"
        if name not in COUNTS_ONLY:
            assert tenants[own]["marker"] in page, f"{name} shows {own} none of its rows"


#: The console's lists: each says whether it exports CSV (``console_view(..., export=...)``).
CONSOLE_LISTS = [(name, path) for name, path in LISTS if name.startswith("console:")]


def _exports(path: str) -> bool | None:
    """What the list's view says of its CSV export: True, False, or None (it says nothing)."""
    return getattr(resolve(path).func, "console_export", None)


def test_every_console_list_says_whether_it_exports_csv() -> None:
    undeclared = [name for name, path in CONSOLE_LISTS if _exports(path) is None]
    assert undeclared == [], "declare console_view(..., export=True or False)"
    exporting = {name for name, path in CONSOLE_LISTS if _exports(path)}
    assert {
        "console:calls",
        "console:runs",
        "console:unknown_calls",
        "console:approvals",
        "console:audit",
        "console:tools",
        "console:combinations",
    } <= exporting


def _csv(rows: dict[str, Any], name: str, path: str) -> str | None:
    """The list's CSV export for the tenant's member, or None where it answers its page."""
    params = QUERIES[name](rows) if name in QUERIES else {}
    client: Client = rows["console"]
    response = client.get(path, {**params, "format": "csv"}, secure=True)
    assert response.status_code == 200, (name, response.status_code)
    if not response["Content-Type"].startswith("text/csv"):
        return None
    body = response.streaming_content if response.streaming else [response.content]
    return b"".join(body).decode()


@pytest.mark.parametrize(("name", "path"), CONSOLE_LISTS, ids=[n for n, _p in CONSOLE_LISTS])
def test_each_console_lists_export_has_only_the_tenants_rows(tenants, name: str, path: str) -> None:
    exports = _exports(path)
    for own, other in (SLUGS, SLUGS[::-1]):
        exported = _csv(tenants[own], name, path)
        if not exports:
            assert exported is None, f"{name} exports CSV and says it does not"
            continue
        assert exported is not None, f"{name} says it exports CSV and answers its page"
        assert other not in exported, f"{name}'s export gives {own} a row of {other}"
        assert tenants[own]["marker"] in exported, f"{name}'s export gives {own} none of its rows"


def _without_tokens(page: str) -> str:
    """The page without what differs between two requests anyway: CSRF tokens and ages."""
    page = re.sub(r"(csrfmiddlewaretoken\" value=|X-CSRFToken\": )\"[^\"]+\"", "", page)
    return re.sub(r"oldest [^<]*", "oldest", page)


@pytest.mark.parametrize("name", sorted(COUNTS_ONLY))
def test_counts_are_only_of_the_tenants_own_calls(name: str) -> None:
    path = dict(LISTS)[name]
    tenant = make_tenant("heron")  # not the module's tenants: the other one comes later
    own = _rows(tenant)
    own["console"] = signed_in(make_user(get_user_model(), "staff", tenant, "admin"))
    metrics.roll_up()
    before = _without_tokens(_get(own, name, path))
    _rows(make_tenant("egret"))
    metrics.roll_up()
    assert _without_tokens(_get(own, name, path)) == before


#: How an object's page names it in its URL: each parameter, and the object's value for it.
OBJECT_IDS = {
    "<int:pk>": lambda found: found.pk,
    "<uuid:call_id>": lambda found: found.call_id,
}


def _object_pages() -> list[tuple[str, str, str]]:
    """(URL name, route, model name) of every console page of one object that answers GET,
    named by its primary key or by another id of it (``OBJECT_IDS``)."""
    found = []
    for route, name, pattern in _walk(get_resolver().url_patterns):
        view = pattern.callback
        if not name.startswith("console:") or not pattern.pattern.converters:
            continue
        assert any(part in route for part in OBJECT_IDS), f"{name}: an id not in OBJECT_IDS"
        if "GET" in getattr(view, "console_methods", ()):
            found.append((name, route, view.console_target))
    return found


OBJECT_PAGES = _object_pages()


def test_the_object_pages_include_every_kind_of_object() -> None:
    names = {name for name, _route, _model in OBJECT_PAGES}
    assert {
        "console:record",
        "console:combination",
        "console:audit_event",
        "console:call",
        "console:call_by_id",
    } <= names
    assert all(model for _name, _route, model in OBJECT_PAGES), "a page that names no model"


@pytest.mark.parametrize(
    ("name", "route", "model_name"), OBJECT_PAGES, ids=[name for name, _r, _m in OBJECT_PAGES]
)
def test_another_tenants_object_is_not_found_on_any_object_page(
    tenants, name: str, route: str, model_name: str
) -> None:
    model = next(m for m in apps.get_models() if m._meta.model_name == model_name)
    for own, other in (SLUGS, SLUGS[::-1]):
        theirs = model._default_manager.filter(tenant__slug=other).order_by("pk").first()
        assert theirs is not None, f"the module's rows have no {model_name} of {other}"
        path = "/" + route
        for part, value in OBJECT_IDS.items():
            if part in path:
                path = path.replace(part, str(value(theirs)))
        response = tenants[own]["console"].get(path, secure=True)
        assert response.status_code == 404, (name, own, response.status_code)
        assert other not in response.content.decode()


def test_an_id_is_searched_for_per_tenant(tenants) -> None:
    """``/ledger/find``: a call id, run id, key, an id in a recorded result, an approval's or
    an audit event's number opens the tenant's own object and is a 404 for the other
    tenant's, the page a missing id gets."""
    for own, other in (SLUGS, SLUGS[::-1]):
        client = tenants[own]["console"]
        for slug, expected in ((own, 302), (other, 404)):
            record = IdempotencyRecord.objects.get(pk=tenants[slug]["unknown"])
            entry = record.entries.order_by("pk").first()
            approval = ApprovalRequest.objects.filter(tenant__slug=slug).order_by("pk").first()
            event = AuditEvent.objects.filter(tenant__slug=slug).order_by("pk").first()
            for text in (
                str(entry.call_id),
                entry.run.run_id,
                record.key,
                f"ord-{tenants[slug]['marker']}",
                f"approval {approval.pk}",
                f"audit event {event.pk}",
            ):
                response = client.get("/ledger/find", {"id": text}, secure=True)
                assert response.status_code == expected, (own, slug, text)
                page = response.content.decode().replace(text, "").replace(quote_plus(text), "")
                assert other not in page, (own, slug, text)


def test_a_key_is_looked_up_per_tenant(tenants) -> None:
    for own, other in (SLUGS, SLUGS[::-1]):
        key = IdempotencyRecord.objects.get(pk=tenants[other]["unknown"]).key
        api: ApiClient = tenants[own]["api"]
        assert api.get("/records", key=key).status_code == 404
        own_key = IdempotencyRecord.objects.get(pk=tenants[own]["unknown"]).key
        assert api.get("/records", key=own_key).status_code == 200


def _tenant_selectors() -> list[str]:
    """The console's selectors that read by tenant (their first parameter)."""
    return [
        name
        for name, function in inspect.getmembers(selectors, inspect.isfunction)
        if function.__module__ == selectors.__name__
        and list(inspect.signature(function).parameters)[:1] == ["tenant"]
    ]


# Arguments a selector needs besides the tenant.
SELECTOR_ARGS: dict[str, dict[str, Any]] = {"unknown_calls": {"limit": 50}}


def _everything_of_both_tenants() -> dict[str, Any]:
    """A rollback report naming every run, approval and unknown call of both tenants."""
    report = combinations.RollbackReport(dry_run=True, combination=0, restored=None)
    report.halted_runs = list(Run.objects.values_list("run_id", flat=True))
    report.invalidated_approvals = list(ApprovalRequest.objects.values_list("pk", flat=True))
    report.unknown = list(IdempotencyRecord.objects.values_list("key", flat=True))
    report.queued_for_lookup = report.executing = report.unknown
    report.needs_human = [
        {"kind": "no_lookup", "key": key, "record_id": pk, "reason": ""}
        for pk, key in IdempotencyRecord.objects.values_list("pk", "key")
    ]
    return {"report": report}


# Arguments built from the module's rows, when the selector is called.
SELECTOR_ROWS = {
    "rollback_changes": _everything_of_both_tenants,
    # The newest unknown call: one tenant's own, the other's to be refused.
    "unknown_call": lambda: {
        "pk": IdempotencyRecord.objects.filter(state="unknown").order_by("pk").last().pk
    },
}


@pytest.mark.parametrize("selector", _tenant_selectors())
def test_each_console_selector_reads_only_its_tenant(tenants, selector: str) -> None:
    for own, other in (SLUGS, SLUGS[::-1]):
        tenant = Tenant.objects.get(slug=own)
        args = SELECTOR_ROWS[selector]() if selector in SELECTOR_ROWS else {}
        found = getattr(selectors, selector)(tenant, **SELECTOR_ARGS.get(selector, args))
        rows = list(found.values()) if isinstance(found, dict) else [found]
        for row in _flatten(rows):
            tenant_id = getattr(row, "tenant_id", None)
            assert tenant_id in (None, tenant.pk), f"{selector} gave {own} a row of {other}"


def _flatten(values: list[Any]) -> Iterator[Any]:
    for value in values:
        if isinstance(value, (list, tuple, set)) or hasattr(value, "model"):
            yield from _flatten(list(value))
        else:
            yield value


def test_the_selectors_under_test_include_the_queues() -> None:
    assert {"inbox", "pending_approvals", "unknown_calls"} <= set(_tenant_selectors())
