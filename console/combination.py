"""One version combination's page: its five versions, state and canary share with the same
lifecycle controls as the combinations list, its rollout plans, runs, metrics over a window
as the combinations list has it (the last day unless chosen), and its audit timeline."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from console import selectors
from console.access import console_view, get_for_tenant
from console.filters import WindowForm
from console.lifecycle import actions_for
from console.navigation import context_for
from ledger.models import Tenant, VersionCombination
from ledger.permissions import Role
from ledger.services import metrics


@console_view(Role.MANAGER, target="versioncombination")
def combination_detail(request: HttpRequest, tenant: Tenant, pk: int) -> HttpResponse:
    combinations = VersionCombination.objects.select_related("previous")
    combination = get_for_tenant(request, tenant, combinations, pk, "No such combination.")
    window = WindowForm(request.GET)
    since, _end = window.span()
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
            window=window,
            **selectors.combination_page(combination),
        ),
    )
