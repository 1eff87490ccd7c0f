"""Ids from query strings and forms: bad ones are refused before they reach a query."""

from __future__ import annotations


def parse_id(value: str) -> int | None:
    """A primary key, or None: ASCII digits only (``"²".isdigit()`` is true, yet ``int`` refuses
    it) and short enough for a bigint (a longer one would be a database error)."""
    if value.isascii() and value.isdigit() and 0 < len(value) <= 18:
        return int(value)
    return None
