"""Unified diffs for display: line kinds for the unified view, pairs for side by side.

Nothing here escapes: the templates do (Django autoescaping), so a diff containing HTML is
shown as text.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import zip_longest


@dataclass(frozen=True)
class Line:
    kind: str  # "add", "del", "hunk", "meta", "context"
    text: str


def parse(diff: str) -> list[Line]:
    lines = []
    for raw in diff.splitlines():
        if raw.startswith(("+++", "---")):
            kind = "meta"
        elif raw.startswith("@@"):
            kind = "hunk"
        elif raw.startswith("+"):
            kind = "add"
        elif raw.startswith("-"):
            kind = "del"
        else:
            kind = "context"
        lines.append(Line(kind, raw))
    return lines


def summary(diff: str) -> tuple[int, int]:
    """Lines added and removed (the triage column of the approvals queue)."""
    kinds = [line.kind for line in parse(diff)]
    return kinds.count("add"), kinds.count("del")


def side_by_side(lines: list[Line]) -> list[tuple[Line | None, Line | None]]:
    """Removed lines on the left, added on the right, aligned within each change."""
    rows: list[tuple[Line | None, Line | None]] = []
    removed: list[Line] = []
    added: list[Line] = []

    def flush() -> None:
        rows.extend(zip_longest(removed, added))
        removed.clear()
        added.clear()

    for line in lines:
        if line.kind == "del":
            removed.append(Line("del", line.text[1:]))
        elif line.kind == "add":
            added.append(Line("add", line.text[1:]))
        else:
            flush()
            if line.kind != "meta":
                shown = line.text[1:] if line.kind == "context" else line.text
                rows.append((Line(line.kind, shown), Line(line.kind, shown)))
    flush()
    return rows
