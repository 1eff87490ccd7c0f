"""One version combination's page: its five versions, state and canary share with the same
lifecycle controls as the combinations list, its rollout plans, runs, metrics over the last
day, and its audit timeline."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from console import selectors
from console.access import console_view, get_for_tenant
from console.lifecycle import actions_for
from console.navigation import context_for
from console.roles import Role
from ledger.models import Tenant, VersionCombination
from ledger.services import metrics

#: The metrics summary covers the same window as the combinations list.
WINDOW_MINUTES = 60 * 24


@console_view(Role.MANAGER, target="versioncombination")
def combination_detail(request: HttpRequest, tenant: Tenant, pk: int) -> HttpResponse:
    combinations = VersionCombination.objects.select_related("previous")
    combination = get_for_tenant(request, tenant, combinations, pk, "No such combination.")
    since = metrics.window_start(WINDOW_MINUTES)
    summary = metrics.by_combination(tenant, since=since).get(combination.pk, metrics.Summary())
    return render(
        request,
        "console/combination_detail.html",
        context_for(
            request,
            tenant,
            combination=combination,
            actions=actions_for(combination),
            summary=summary,
            window_hours=WINDOW_MINUTES // 60,
            **selectors.combination_page(combination),
        ),
    )
