"""Links to the console's object pages, only for users whose roles open them (``pages``, from
``console.navigation``); for the others the id is plain text.

``{% target_url event pages %}``: the page of an audit event's target, or empty.
``{% object_link "record" record.pk record.key pages %}``: the text, linked to the page.
``{% object_url "call" entry.pk %}``: the URL of an object's page (``object_url``).
``{% key_link "record" record.pk record.key pages %}``: a long id (a key) on one line, cut
with an ellipsis, whole on hover and on a copy button, linked as ``object_link`` links.
``{% clip run.run_id url size="short" copy=label %}``: a long value on one line, cut with an
ellipsis, whole in its title and its copy button.
"""

from __future__ import annotations

from functools import lru_cache

from django import template
from django.conf import settings
from django.urls import get_script_prefix, get_urlconf, reverse
from django.utils.html import conditional_escape, format_html
from django.utils.safestring import SafeString
from django.utils.translation import get_language, gettext
from django.utils.translation import gettext as _

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
#: Stands for the id while a page's URL is reversed once; its digits are then replaced.
_PLACEHOLDER = 918_273_645_546_372_819


@lru_cache(maxsize=256)
def _around_id(
    page: str, script_prefix: str, urlconf: str | None, root: str, language: str | None
) -> tuple[str, str]:
    url = reverse(f"console:{page}", kwargs={"pk": _PLACEHOLDER})
    before, found, after = url.partition(str(_PLACEHOLDER))
    if not found:
        raise ValueError(f"console:{page} does not write its pk as digits")
    return before, after


@register.simple_tag
def object_url(page: str, pk: int) -> str:
    """``reverse(f"console:{page}", kwargs={"pk": pk})``: the page's ``<int:pk>`` URL reversed
    once (per script prefix, URLconf and language) and the id written into it, as the int converter
    writes it. A list links each of its rows this way: a ``reverse`` a row was a tenth of the
    calls list's time (docs/performance.md)."""
    before, after = _around_id(
        page, get_script_prefix(), get_urlconf(), settings.ROOT_URLCONF, get_language()
    )
    return f"{before}{int(pk)}{after}"


@register.simple_tag
def target_url(event: AuditEvent, pages: set[str]) -> str:
    page = TARGET_PAGES.get(event.target_type)
    pk = parse_id(event.target_id)
    if page is None or pk is None or page not in pages:
        return ""
    return object_url(page, pk)


@register.simple_tag
def object_link(page: str, pk: int | None, text: object, pages: set[str]) -> SafeString:
    if pk is None or page not in pages:
        return conditional_escape(str(text))
    return format_html('<a href="{}">{}</a>', object_url(page, pk), text)


@register.simple_tag
def key_link(page: str, pk: int | None, key: str, pages: set[str]) -> SafeString:
    """``key`` as ``object_clip`` shows it, sized as a key (``.key-cell .key``), with a copy
    button named for a key."""
    return format_html(
        '<span class="key-cell">{}</span>',
        object_clip(page, pk, key, pages, size="key", copy=_("Copy the key")),
    )


@register.simple_tag
def clip(text: object, url: str = "", size: str = "", copy: str = "") -> SafeString:
    """``text`` on one line, cut with an ellipsis where its column ends (``size``: "short",
    "long", "key" or the default, console.css ``.clip``), linked to ``url`` if given. The
    whole text is its title and, with ``copy`` (the button's name for screen readers), a copy
    button's (shown by copy.js where the browser can copy)."""
    value = str(text)
    classes = f"clip {size}".rstrip()
    if url:
        html = format_html('<a class="{}" href="{}" title="{}">{}</a>', classes, url, value, value)
    else:
        html = format_html('<span class="{}" title="{}">{}</span>', classes, value, value)
    if not copy:
        return html
    button = format_html(
        ' <button type="button" class="copy" data-copy="{}" aria-label="{}" hidden>{}</button>',
        value,
        copy,
        gettext("Copy"),
    )
    return html + button


@register.simple_tag
def object_clip(
    page: str, pk: int | None, text: object, pages: set[str], size: str = "", copy: str = ""
) -> str:
    """``clip`` of ``text``, linked to the object's page for users whose roles open it."""
    linked = pk is not None and page in pages
    return clip(text, object_url(page, pk) if linked and pk is not None else "", size, copy)
