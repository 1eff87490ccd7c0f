"""``{{ seconds|age }}``: 45 s, 12 min, 3 h, 2 d."""

from __future__ import annotations

from django import template
from django.utils.translation import gettext as _

register = template.Library()


@register.filter
def age(seconds: int | None) -> str:
    if seconds is None:
        return "—"
    if seconds < 60:
        return _("%(n)d s") % {"n": seconds}
    if seconds < 3600:
        return _("%(n)d min") % {"n": seconds // 60}
    if seconds < 86400:
        return _("%(n)d h") % {"n": seconds // 3600}
    return _("%(n)d d") % {"n": seconds // 86400}
