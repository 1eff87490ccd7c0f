"""The On call page: a manager sets who is told about what waits on a human (channels per
role and tier) and the tenant's service levels. Plain forms with redirect-after-POST, so it
works without JavaScript; with HTMX a form swaps the page's content in place."""

from __future__ import annotations

from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.utils.translation import gettext as _

from console.access import console_view
from console.navigation import context_for
from console.params import parse_id
from ledger import notifications
from ledger.errors import LedgerError
from ledger.models import Notification, NotificationChannel, OnCallPolicy, Tenant
from ledger.permissions import Role


@console_view(Role.MANAGER, methods=("GET", "POST"), export=False)
def on_call(request: HttpRequest, tenant: Tenant) -> HttpResponse:
    """The tenant's channels, service levels and latest notifications (POST changes one)."""
    if request.method == "POST":
        _change(request, tenant)
        if not getattr(request, "htmx", False):
            return redirect("console:on_call")
    context = context_for(
        request,
        tenant,
        channels=NotificationChannel.objects.filter(tenant=tenant).order_by("role", "tier", "pk"),
        policy=notifications.policy_of(tenant),
        recent=Notification.objects.filter(tenant=tenant)
        .select_related("channel")
        .order_by("-pk")[:20],
        roles=NotificationChannel.Role.values,
        kinds=NotificationChannel.Kind.values,
    )
    htmx = getattr(request, "htmx", False)
    return render(
        request, "console/on_call.html#settings" if htmx else "console/on_call.html", context
    )


def _change(request: HttpRequest, tenant: Tenant) -> None:
    actor = request.user.get_username()
    form = request.POST
    action = form.get("action", "")
    try:
        if action == "add_channel":
            notifications.add_channel(
                tenant=tenant,
                actor=actor,
                source="console",
                role=form.get("role", ""),
                tier=int(form.get("tier", "1")),
                kind=form.get("kind", ""),
                target=form.get("target", ""),
            )
            messages.success(request, _("Channel added."))
        elif action == "remove_channel":
            channel_id = parse_id(form.get("channel", ""))
            if channel_id is None:
                messages.error(request, _("No such channel."))
                return
            notifications.remove_channel(
                tenant=tenant, actor=actor, source="console", channel_id=channel_id
            )
            messages.success(request, _("Channel removed."))
        elif action == "set_policy":
            defaults = OnCallPolicy()
            notifications.set_policy(
                tenant=tenant,
                actor=actor,
                source="console",
                first_sla_minutes=int(form.get("first_sla_minutes", defaults.first_sla_minutes)),
                second_sla_minutes=int(form.get("second_sla_minutes", defaults.second_sla_minutes)),
                expiry_warning_minutes=int(
                    form.get("expiry_warning_minutes", defaults.expiry_warning_minutes)
                ),
            )
            messages.success(request, _("Service levels saved."))
        else:
            messages.error(request, _("Unknown action."))
    except ValueError:
        messages.error(request, _("Tiers and service levels are whole numbers."))
    except LedgerError as exc:
        messages.error(request, exc.message)
