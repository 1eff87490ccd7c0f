"""One action's page: its idempotency record (key, state, fingerprint, lease and fencing token,
executions and dedup hits), its write plan, the calls under it, its look-ups, approvals and
compensation, and the audit timeline of all of them."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from console import selectors
from console.access import console_view, get_for_tenant
from console.navigation import context_for
from ledger.domain import RecordState
from ledger.models import Compensation, IdempotencyRecord, Tenant
from ledger.permissions import Role
from reconcile import compensations


@console_view(Role.OPERATOR, Role.APPROVER, Role.MANAGER, target="idempotencyrecord")
def record_detail(request: HttpRequest, tenant: Tenant, pk: int) -> HttpResponse:
    records = IdempotencyRecord.objects.select_related("tool", "run", "combination")
    record = get_for_tenant(request, tenant, records, pk, "No such action.")
    page = selectors.record_page(record)
    compensation = page["compensation"]
    shown = (
        compensations.shown_states([compensation]) if isinstance(compensation, Compensation) else {}
    )
    offered = bool(compensations.offered([record.pk]))
    # An action that happened and is neither a read nor a compensation could have one: say so.
    missing = (
        not offered
        and record.state == RecordState.SUCCEEDED
        and not compensations.is_a_read(record)
        and not compensations.is_compensation(record)
    )
    return render(
        request,
        "console/record_detail.html",
        context_for(
            request,
            tenant,
            record=record,
            compensation_offered=offered,
            compensation_missing=missing,
            compensation_state=next(iter(shown.values()), None),
            **page,
        ),
    )
