"""``{% target_url event pages %}``: the console page of an audit event's target, when there is
one and the user's roles open it (``pages``, from ``console.navigation``); empty otherwise."""

from __future__ import annotations

from django import template
from django.urls import reverse

from console.params import parse_id
from ledger.models import AuditEvent

register = template.Library()

#: Each target type with a page: that page's URL name, and the list whose roles open it.
TARGET_PAGES = {
    "approvalrequest": ("approval", "approvals"),
    "run": ("run", "runs"),
    "ledgerentry": ("call", "calls"),
    "idempotencyrecord": ("unknown_call", "unknown_calls"),
}


@register.simple_tag
def target_url(event: AuditEvent, pages: set[str]) -> str:
    page = TARGET_PAGES.get(event.target_type)
    pk = parse_id(event.target_id)
    if page is None or pk is None or page[1] not in pages:
        return ""
    return reverse(f"console:{page[0]}", kwargs={"pk": pk})
