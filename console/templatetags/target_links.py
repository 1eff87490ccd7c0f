"""Links to the console's object pages, only for users whose roles open them (``pages``, from
``console.navigation``); for the others the id is plain text.

``{% target_url event pages %}``: the page of an audit event's target, or empty.
``{% object_link "record" record.pk record.key pages %}``: the text, linked to the page.
"""

from __future__ import annotations

from django import template
from django.urls import reverse
from django.utils.html import conditional_escape, format_html
from django.utils.safestring import SafeString

from console.params import parse_id
from ledger.models import AuditEvent

register = template.Library()

#: Each target type with a page: that page's URL name.
TARGET_PAGES = {
    "approvalrequest": "approval",
    "run": "run",
    "ledgerentry": "call",
    "idempotencyrecord": "record",
    "versioncombination": "combination",
    "auditevent": "audit_event",
}


@register.simple_tag
def target_url(event: AuditEvent, pages: set[str]) -> str:
    page = TARGET_PAGES.get(event.target_type)
    pk = parse_id(event.target_id)
    if page is None or pk is None or page not in pages:
        return ""
    return reverse(f"console:{page}", kwargs={"pk": pk})


@register.simple_tag
def object_link(page: str, pk: int | None, text: object, pages: set[str]) -> SafeString:
    if pk is None or page not in pages:
        return conditional_escape(str(text))
    return format_html('<a href="{}">{}</a>', reverse(f"console:{page}", kwargs={"pk": pk}), text)
