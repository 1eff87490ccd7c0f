"""A write plan's stored diff applied to a file's text (``whatthepatch``: the unified diffs
runtimes record, parsed and applied strictly, without a ``patch`` binary on the worker)."""

from __future__ import annotations

import whatthepatch


def apply_diff(text: str, diff: str) -> list[str] | None:
    """The lines of ``text`` with the first file of ``diff`` applied (without line ends), or
    None when the diff does not parse or does not apply: a line it removes or keeps differs."""
    try:
        parsed = next(iter(whatthepatch.parse_patch(diff)), None)
        return None if parsed is None else whatthepatch.apply_diff(parsed, text)
    except whatthepatch.exceptions.WhatThePatchException:
        return None
