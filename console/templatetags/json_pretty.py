"""``{{ value|json_pretty }}``: stored JSON shown as JSON (indented), not as a Python repr.
The result is plain text: the template escapes it like any other value."""

from __future__ import annotations

import json

from django import template

register = template.Library()


@register.filter
def json_pretty(value: object) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True, default=str)
