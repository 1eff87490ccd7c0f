"""Console pages at scale: server time (in-process, the whole Django stack) and query count of
every console list page, the run timeline and the metrics dashboard; EXPLAIN of the slowest
query."""

from __future__ import annotations

import time
from datetime import timedelta
from typing import Any
from urllib.parse import urlencode, urlsplit

from django.contrib.auth import get_user_model
from django.db import connection
from django.db.models import Model
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import URLPattern, resolve, reverse
from django.utils import timezone

from bench import loader
from bench.load import ms, percentile
from ledger.models import (
    ApprovalRequest,
    AuditEvent,
    IdempotencyRecord,
    LedgerEntry,
    Membership,
    Run,
    Tenant,
)
from ledger.permissions import Role, allows

# Pages that only take a POST are not list pages (any other page answering 405 is dropped too);
# ``find`` needs an id, and is measured with one (``searches``).
SKIP = {"switch_tenant", "tools_import", "unknown_bulk", "set_language", "find"}
#: Searches for what only the load makes: before it, the text names nothing, which a whole
#: call id's shape answers on another path (a probe is logged), so no small-size query count
#: of theirs is compared with the count at scale.
LOADED_ONLY = {"find_run"}
#: The answer a page is measured for when it is not 200: an id found whole redirects to its
#: page, one that names nothing is a 404 (a text that names several things lists them: 200).
EXPECTED_STATUS = {
    "find_call": 302,
    "find_run": 302,
    "find_key": 302,
    "find_order": 302,
    "find_event": 302,
    "find_nothing": 404,
}


def list_pages() -> dict[str, str]:
    """Every console GET page without a path parameter (found from the URLconf, so new list
    pages are measured without changing the bench)."""
    from console import urls

    pages: dict[str, str] = {}
    for pattern in urls.console_patterns:
        name = pattern.name if isinstance(pattern, URLPattern) else None
        if name and not pattern.pattern.converters and name not in SKIP:
            pages[name] = reverse(f"console:{name}")
    return pages


#: Whom each page is measured as: a member of the measured tenant holding the first of these
#: roles the page is open to (an operator wherever an operator may look; an admin where only
#: an admin may, the API tokens).
ROLES = (Role.OPERATOR, Role.APPROVER, Role.MANAGER, Role.ADMIN)


def members(tenant: Tenant) -> dict[Role, Client]:
    """A signed-in client for each of ``ROLES``: a user who is a member of ``tenant`` alone,
    with that role there (not staff, not an admin)."""
    user_model = get_user_model()
    clients: dict[Role, Client] = {}
    for role in ROLES:
        user, _ = user_model.objects.get_or_create(username=f"bench-{role.value}")
        Membership.objects.update_or_create(user=user, tenant=tenant, defaults={"role": role})
        client = Client()
        client.force_login(user)
        clients[role] = client
    return clients


def role_for(url: str) -> Role:
    """The role ``url`` is measured as (``ROLES``)."""
    allowed = tuple(getattr(resolve(urlsplit(url).path).func, "console_roles", ()))
    return next(role for role in ROLES if allows({role}, allowed))


def measure(clients: dict[Role, Client], pages: dict[str, str], repeat: int) -> dict[str, Any]:
    results: dict[str, Any] = {}
    slowest: tuple[float, str] = (0.0, "")
    for name, url in pages.items():
        times: list[float] = []
        cpu: list[float] = []
        queries = 0
        status = 0
        role = role_for(url)
        client = clients[role]
        for _ in range(repeat):
            with CaptureQueriesContext(connection) as captured:
                began, began_cpu = time.perf_counter(), time.process_time()
                response = client.get(url, secure=True)
                times.append(time.perf_counter() - began)
                cpu.append(time.process_time() - began_cpu)
            status = response.status_code
            queries = len(captured.captured_queries)
            for query in captured.captured_queries:
                took = float(query.get("time") or 0)
                if took > slowest[0]:
                    slowest = (took, query["sql"])
        if status == 405:
            continue
        results[name] = {
            "url": url,
            "as": role.value,
            "status": status,
            "expected_status": EXPECTED_STATUS.get(name, 200),
            "p50_ms": ms(percentile(times, 0.50)),
            "p95_ms": ms(percentile(times, 0.95)),
            # This process's CPU alone (PostgreSQL's is not in it): on a shared machine, the
            # part of a page's time that other processes' load does not inflate.
            "cpu_p50_ms": ms(percentile(cpu, 0.50)),
            "cpu_p95_ms": ms(percentile(cpu, 0.95)),
            "queries": queries,
        }
    return {"pages": results, "slowest_query": slowest}


def explain(sql: str) -> str:
    if not sql.lstrip().upper().startswith("SELECT"):
        return f"(not a SELECT; not explained) {sql[:500]}"
    with connection.cursor() as cursor:
        cursor.execute(f"EXPLAIN (ANALYZE, BUFFERS) {sql}")
        return "\n".join(row[0] for row in cursor.fetchall())


def _first(model: type[Model], tenant: Tenant, field: str, default: str = "") -> str:
    """``field`` of the tenant's newest row of ``model`` (``default`` if it has none)."""
    rows = model._default_manager.filter(tenant=tenant).order_by("-pk")
    found = rows.values_list(field, flat=True).first()
    return default if found is None else str(found)


def _order_id(tenant: Tenant) -> str:
    """The order id in the recorded result of the tenant's newest succeeded action that has
    one (before the load, the id the loader gives its row 1's: none of the tenant's yet)."""
    results = IdempotencyRecord.objects.filter(tenant=tenant, result__has_key="order_id")
    found = results.order_by("-pk").values_list("result", flat=True).first()
    return str(found["order_id"]) if found else loader.order_id(1)


def searches(tenant: Tenant) -> dict[str, str]:
    """The list pages' searches, measured as pages of their own, with values that match the
    loader's rows (``bench.loader``) of ``tenant``: keys by prefix and by fragment, run ids and
    call ids by their first characters, tools by part of a name, relative and absolute time
    ranges, the filters of the unknown queue, the approvals and the audit log, and ids pasted in
    the search box."""
    run = loader.run_id(0)  # run 0 is the measured tenant's (loader.SLOTS)
    key_prefix = f"agent:{tenant.slug}:u:{run[:6]}"
    now = timezone.localtime()
    window = {
        "since": (now - timedelta(hours=13)).strftime("%Y-%m-%dT%H:%M"),
        "until": (now - timedelta(hours=12)).strftime("%Y-%m-%dT%H:%M"),
    }
    found = {
        "calls_key_prefix": ("calls", {"key": key_prefix}),
        "calls_key_fragment": ("calls", {"key": "cart-42"}),
        "calls_key_rare": ("calls", {"key": "meeting-9999"}),
        "calls_run_prefix": ("calls", {"run": run[:8]}),
        "calls_call_prefix": ("calls", {"call": "ab"}),
        "calls_tool_fragment": ("calls", {"tool": "order"}),
        "calls_last_1h": ("calls", {"range": "1h"}),
        "calls_window": ("calls", window),
        "calls_fragment_window": ("calls", {"key": "cart-42", **window}),
        "runs_run_prefix": ("runs", {"run": run[:8]}),
        "runs_last_24h": ("runs", {"range": "24h"}),
        "runs_window": ("runs", window),
        "unknown_tool": ("unknown_calls", {"tool": "update_cart"}),
        "unknown_older_than": ("unknown_calls", {"older_than": "1h"}),
        "approvals_tool": ("approvals", {"tool": "book_meeting"}),
        "audit_action": ("audit", {"action": "record.failed"}),
        "audit_actor": ("audit", {"actor": "al_"}),
        # An id pasted in the top bar's search box: a call id, a run id, a key whole or in
        # part, a downstream's order id in a recorded result, an approval (listed: the
        # operator's role opens its action, not its page), an audit event, and one that
        # names nothing.
        "find_call": ("find", {"id": _first(LedgerEntry, tenant, "call_id")}),
        "find_run": ("find", {"id": run}),
        "find_key": ("find", {"id": _first(IdempotencyRecord, tenant, "key")}),
        "find_key_part": ("find", {"id": "cart-42"}),
        "find_order": ("find", {"id": _order_id(tenant)}),
        "find_approval": ("find", {"id": f"approval {_first(ApprovalRequest, tenant, 'pk', '1')}"}),
        "find_event": ("find", {"id": f"audit event {_first(AuditEvent, tenant, 'pk', '1')}"}),
        "find_nothing": ("find", {"id": "ord_000000000000"}),
    }
    return {
        name: f"{reverse(f'console:{page}')}?{urlencode(query)}"
        for name, (page, query) in found.items()
    }


def pages_for(tenant: Tenant, timeline_run: Run) -> dict[str, str]:
    pages = list_pages()
    pages["run_timeline"] = reverse("console:run", args=[timeline_run.pk])
    pages.update(searches(tenant))
    return pages
