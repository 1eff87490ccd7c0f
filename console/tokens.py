"""The API tokens page: a tenant's admins see every token of the tenant, who owns it and what it
may do now, and revoke one (audited, with a reason). Issuing stays on the command line
(``manage.py issue_token``), where the plaintext is shown once."""

from __future__ import annotations

from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.utils.translation import gettext as _

from console.access import console_view
from console.navigation import context_for
from console.params import parse_id
from ledger.errors import LedgerError
from ledger.models import AuditEvent, Tenant
from ledger.permissions import Role
from ledger.services import tokens


@console_view(Role.ADMIN, export=False)
def api_tokens(request: HttpRequest, tenant: Tenant) -> HttpResponse:
    """The tenant's tokens, newest first."""
    context = context_for(request, tenant, rows=tokens.tenant_tokens(tenant))
    return render(request, "console/tokens.html", context)


@console_view(Role.ADMIN, methods=("POST",))
def revoke_token(request: HttpRequest, tenant: Tenant) -> HttpResponse:
    """Revoke one token; redirect-after-POST back to the list, naming the token revoked."""
    token_id = parse_id(request.POST.get("token", ""))
    if token_id is None:
        messages.error(request, _("No such token."))
        return redirect("console:tokens")
    try:
        token = tokens.revoke_token(
            tenant=tenant,
            token_id=token_id,
            actor=request.user.get_username(),
            source=AuditEvent.Source.CONSOLE,
            reason=request.POST.get("reason", ""),
        )
    except LedgerError as exc:
        messages.error(request, exc.message)
    else:
        messages.success(
            request,
            _("Token %(name)s (%(prefix)s…) revoked.")
            % {"name": token.name, "prefix": token.prefix},
        )
    return redirect("console:tokens")
