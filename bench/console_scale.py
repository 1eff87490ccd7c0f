"""Console pages at scale: server time (in-process, the whole Django stack) and query count of
every console list page, the run timeline and the metrics dashboard; EXPLAIN of the slowest
query."""

from __future__ import annotations

import time
from typing import Any
from urllib.parse import urlencode

from django.contrib.auth import get_user_model
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import URLPattern, reverse

from bench.load import ms, percentile
from console.models import Membership
from ledger.models import Run, Tenant

# Pages that only take a POST are not list pages (any other page answering 405 is dropped too).
SKIP = {"switch_tenant", "tools_import", "unknown_bulk", "set_language"}


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


def signed_in_client(tenant: Tenant) -> Client:
    user_model = get_user_model()
    user, _ = user_model.objects.get_or_create(
        username="bench-admin", defaults={"is_staff": True, "is_superuser": True}
    )
    Membership.objects.get_or_create(user=user, tenant=tenant)
    client = Client()
    client.force_login(user)
    return client


def measure(client: Client, pages: dict[str, str], repeat: int) -> dict[str, Any]:
    results: dict[str, Any] = {}
    slowest: tuple[float, str] = (0.0, "")
    for name, url in pages.items():
        times: list[float] = []
        queries = 0
        status = 0
        for _ in range(repeat):
            with CaptureQueriesContext(connection) as captured:
                began = time.perf_counter()
                response = client.get(url, secure=True)
                times.append(time.perf_counter() - began)
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
            "status": status,
            "p50_ms": ms(percentile(times, 0.50)),
            "p95_ms": ms(percentile(times, 0.95)),
            "queries": queries,
        }
    return {"pages": results, "slowest_query": slowest}


def explain(sql: str) -> str:
    if not sql.lstrip().upper().startswith("SELECT"):
        return f"(not a SELECT; not explained) {sql[:500]}"
    with connection.cursor() as cursor:
        cursor.execute(f"EXPLAIN (ANALYZE, BUFFERS) {sql}")
        return "\n".join(row[0] for row in cursor.fetchall())


#: The explorer's searches (console/explorer.py), measured as pages of their own: ids by prefix,
#: keys and tools by fragment, a relative time range. The values match the loader's rows
#: (keys ``agent:bench:u:load-run-{run}:{tool}:{i}``).
SEARCHES = {
    "find_key_part": ("calls", {"key": "load-run-7:"}),
    "find_key_rare": ("calls", {"key": ":424242"}),
    "find_run_start": ("calls", {"run": "load-run-4"}),
    "find_call_start": ("calls", {"call": "ab"}),
    "find_tool_part": ("calls", {"tool": "order"}),
    "find_last_24h": ("calls", {"range": "24h"}),
    "find_runs_start": ("runs", {"run": "load-run-4"}),
}


def pages_for(tenant: Tenant, timeline_run: Run) -> dict[str, str]:
    pages = list_pages()
    pages["run_timeline"] = reverse("console:run", args=[timeline_run.pk])
    for name, (page, query) in SEARCHES.items():
        pages[name] = f"{reverse(f'console:{page}')}?{urlencode(query)}"
    return pages
