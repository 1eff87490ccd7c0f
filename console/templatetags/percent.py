"""``{{ rate|percent }}``: a rate between 0 and 1 as a percentage, ``0.245`` → ``24.5%``."""

from __future__ import annotations

from django import template
from django.template.defaultfilters import floatformat

register = template.Library()


@register.filter
def percent(rate: float | None) -> str:
    if rate is None:
        return "—"
    return f"{floatformat(float(rate) * 100, 1)}%"
