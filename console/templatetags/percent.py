"""``{{ rate|percent }}``: a rate between 0 and 1 as a percentage, ``0.245`` → ``24.5%``;
``{{ value|metric_value:name }}``: a metric's value as every page shows it, a rate as a
percentage and a count without decimals it does not have."""

from __future__ import annotations

from django import template
from django.template.defaultfilters import floatformat

from console.charts import RATES

register = template.Library()


@register.filter
def percent(rate: float | None) -> str:
    if rate is None:
        return "—"
    return f"{floatformat(float(rate) * 100, 1)}%"


@register.filter
def metric_value(value: float | None, metric: str) -> str:
    if value is None:
        return "—"
    if metric in RATES:
        return percent(value)
    return floatformat(value, -2)
