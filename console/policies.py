"""The approval policies page: a manager says which actions a human approves before they first
run (``ledger.approval_policies``), and removes a policy; both audited. A plain form with
redirect-after-POST, so it works without JavaScript."""

from __future__ import annotations

import json
from typing import Any

from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.utils.translation import gettext as _

from console.access import console_view
from console.navigation import context_for
from console.params import parse_id
from ledger.approval_policies import Operator
from ledger.errors import LedgerError
from ledger.models import ApprovalPolicy, AuditEvent, Tenant, VersionCombination
from ledger.permissions import Role
from ledger.services import approval_policies


@console_view(Role.MANAGER, methods=("GET", "POST"), export=False)
def policies(request: HttpRequest, tenant: Tenant) -> HttpResponse:
    """The tenant's policies, oldest first (the first that matches asks); POST adds or removes
    one."""
    if request.method == "POST":
        _change(request, tenant)
        return redirect("console:policies")
    found = ApprovalPolicy.objects.filter(tenant=tenant).select_related("combination")
    context = context_for(
        request,
        tenant,
        policies=[(p, approval_policies.spec_of(p).describe()) for p in found.order_by("pk")],
        operators=list(Operator),
        combinations=VersionCombination.objects.filter(tenant=tenant).order_by("label"),
    )
    return render(request, "console/policies.html", context)


def _value(text: str) -> Any:
    """A number when the text is one, else the text itself."""
    try:
        value = json.loads(text)
    except ValueError:
        return text
    return value if isinstance(value, int | float) and not isinstance(value, bool) else text


def _change(request: HttpRequest, tenant: Tenant) -> None:
    form = request.POST
    actor = request.user.get_username()
    try:
        if form.get("action") == "remove":
            policy_id = parse_id(form.get("policy", ""))
            if policy_id is None:
                messages.error(request, _("No such policy."))
                return
            approval_policies.remove_policy(
                tenant=tenant, policy_id=policy_id, actor=actor, source=AuditEvent.Source.CONSOLE
            )
            messages.success(request, _("Policy removed."))
            return
        path = form.get("path", "").strip()
        policy = approval_policies.add_policy(
            tenant=tenant,
            actor=actor,
            source=AuditEvent.Source.CONSOLE,
            name=form.get("name", ""),
            reason=form.get("reason", ""),
            tool=form.get("tool", "").strip(),
            path=path,
            operator=form.get("operator", "") if path else "",
            value=_value(form.get("value", "").strip()) if path else None,
            write_prefix=form.get("write_prefix", "").strip(),
            combination_id=parse_id(form.get("combination", "")),
        )
        messages.success(request, _("Policy “%(name)s” added.") % {"name": policy.name})
    except LedgerError as exc:
        messages.error(request, exc.message)
