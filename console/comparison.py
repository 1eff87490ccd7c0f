"""The shadow comparison: each shadow run beside the live run it mirrors (managers).

The list pairs shadow runs with their live runs, newest first (keyset pages,
``before=<shadow run pk>``), with the two combinations' metrics and the shadow's verdict per
threshold; a pair's page shows every step side by side, marking where they differ.
"""

from __future__ import annotations

from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render

from console.access import console_view, get_for_tenant
from console.params import parse_id
from console.views import context_for
from ledger.combinations import comparison
from ledger.models import Run, Tenant, VersionCombination
from ledger.permissions import Role

PAGE_SIZE = 50


@console_view(Role.MANAGER, export=False)
def shadow_pairs(request: HttpRequest, tenant: Tenant) -> HttpResponse:
    before_param = request.GET.get("before", "")
    before = parse_id(before_param) if before_param else None
    if before_param and before is None:
        raise Http404("No such page.")
    page = comparison.shadow_pairs(tenant, limit=PAGE_SIZE + 1, before=before)
    more = len(page) > PAGE_SIZE
    page = page[:PAGE_SIZE]
    groups = sorted({(p.live.combination_id, p.shadow.combination_id) for p in page}, key=str)
    labels = dict(
        VersionCombination.objects.filter(
            tenant=tenant, pk__in={pk for group in groups for pk in group if pk}
        ).values_list("pk", "label")
    )
    verdicts = [
        (
            labels.get(live_id) if live_id else None,
            labels.get(shadow_id) if shadow_id else None,
            comparison.metric_verdicts(tenant, live_id=live_id, shadow_id=shadow_id),
        )
        for live_id, shadow_id in groups
        if shadow_id is not None
    ]
    return render(
        request,
        "console/shadow_pairs.html",
        context_for(
            request,
            tenant,
            pairs=page,
            verdicts=verdicts,
            paged=before is not None,
            next_before=page[-1].shadow.pk if more else None,
            query="",
        ),
    )


@console_view(Role.MANAGER, target="run")
def shadow_pair(request: HttpRequest, tenant: Tenant, pk: int) -> HttpResponse:
    shadows = Run.objects.filter(shadow_of__isnull=False)
    run = get_for_tenant(request, tenant, shadows, pk, "No such shadow run.")
    pair = comparison.shadow_pair(tenant, run.pk)
    if pair is None:
        raise Http404("No such shadow run.")
    return render(request, "console/shadow_pair.html", context_for(request, tenant, pair=pair))
