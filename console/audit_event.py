"""One audit event's page: who did what to which object (linked to its page), from where, with
what outcome, and the before and after it recorded (redacted when it was written, and again as
it is shown)."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from console.access import console_view, get_for_tenant
from console.navigation import context_for
from ledger.models import AuditEvent, Tenant
from ledger.redaction import redact, redact_text


@console_view(target="auditevent")
def audit_event(request: HttpRequest, tenant: Tenant, pk: int) -> HttpResponse:
    event = get_for_tenant(request, tenant, AuditEvent.objects.all(), pk, "No such event.")
    # Events are redacted when written (``ledger.services.audit``); the log is append-only, so
    # an event written under narrower rules than today's is redacted again as it is shown.
    return render(
        request,
        "console/audit_event.html",
        context_for(
            request,
            tenant,
            event=event,
            before=redact(event.before),
            after=redact(event.after),
            detail=redact_text(event.detail),
        ),
    )
