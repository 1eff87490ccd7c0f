"""``{{ seconds|age }}`` (seconds or a duration): 45 s, 12 min, 3 h, 2 d.
``{{ seconds|countdown }}``: the time left."""

from __future__ import annotations

from datetime import timedelta

from django import template
from django.utils.translation import gettext as _

register = template.Library()


@register.filter
def age(seconds: int | timedelta | None) -> str:
    if seconds is None:
        return "—"
    if isinstance(seconds, timedelta):
        seconds = max(0, int(seconds.total_seconds()))
    if seconds < 60:
        return _("%(n)d s") % {"n": seconds}
    if seconds < 3600:
        return _("%(n)d min") % {"n": seconds // 60}
    if seconds < 86400:
        return _("%(n)d h") % {"n": seconds // 3600}
    return _("%(n)d d") % {"n": seconds // 86400}


def countdown_formats() -> dict[str, str]:
    """How a time left is written, in the user's language: ``{d}``, ``{h}`` and ``{m}`` stand
    for days, hours and minutes. The server writes it (``countdown``) and static/console/
    countdown.js rewrites it each minute with the same words."""
    return {
        "expired": _("expired"),
        "under_minute": _("under a minute"),
        "minutes": _("{m} min"),
        "hours": _("{h} h {m} min"),
        "days": _("{d} d {h} h"),
    }


@register.filter
def countdown(seconds: float | None) -> str:
    """The time left until a deadline ``seconds`` away: 12 min, 5 h 3 min, 2 d 4 h."""
    if seconds is None:
        return "—"
    formats = countdown_formats()
    whole = int(seconds)
    if whole <= 0:
        return formats["expired"]
    if whole < 60:
        return formats["under_minute"]
    days, hours, minutes = whole // 86400, whole // 3600 % 24, whole // 60 % 60
    key = "days" if days else "hours" if hours else "minutes"
    return formats[key].format(d=days, h=hours, m=minutes)
