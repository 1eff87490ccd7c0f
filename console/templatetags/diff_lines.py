"""``{{ diff|diff_lines }}``: a unified diff's lines with their kinds, for
``console/_diff.html`` to colour (``console.diffs.parse``; the template escapes each line)."""

from __future__ import annotations

from django import template

from console import diffs

register = template.Library()


@register.filter
def diff_lines(diff: str) -> list[diffs.Line]:
    return diffs.parse(diff or "")
