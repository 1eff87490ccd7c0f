"""What an operator is shown of a file a conditional write conflicts with: the file as it is
now, and whether the write plan still applies to it.

A snapshot holds, beside the hashes of the check:

- ``size``: the file's size in bytes;
- ``content``: its text (None for a binary file or one over ``MAX_BYTES``);
- ``plan_applies``: whether the plan's stored diff still applies to it (None without a diff
  or a text), i.e. whether someone else changed only lines the plan does not touch;
- ``applying_now``: if it applies, the change applying the plan now would make, as a unified
  diff (empty otherwise).

Like all evidence it is redacted by the action's data classification before it is stored
(``services``): secrets replaced, long text cut, restricted data kept only as its hash.
"""

from __future__ import annotations

import difflib
from typing import Any

from ledger.models import WritePlan
from reconcile.filehash import confined_path
from reconcile.patches import apply_diff

#: The largest file a snapshot reads; only its size is kept of a larger one.
MAX_BYTES = 1 << 20


def file_snapshot(root: str, plan: WritePlan) -> dict[str, Any]:
    """The snapshot of the plan's file under ``root`` now (a missing file is empty). Raises
    ``filehash.PathRefused`` or ``OSError`` when it cannot be read."""
    target = confined_path(root, plan.path)
    if not target.exists():
        return snapshot(b"", plan)
    with target.open("rb") as handle:
        content = handle.read(MAX_BYTES + 1)
    if len(content) > MAX_BYTES:
        return {
            "size": target.stat().st_size,
            "content": None,
            "plan_applies": None,
            "applying_now": "",
        }
    return snapshot(content, plan)


def snapshot(content: bytes, plan: WritePlan) -> dict[str, Any]:
    """The snapshot of a file whose bytes are ``content``."""
    try:
        text: str | None = content.decode("utf-8")
    except UnicodeDecodeError:
        text = None
    if text is None or not plan.diff:
        return {"size": len(content), "content": text, "plan_applies": None, "applying_now": ""}
    patched = apply_diff(text, plan.diff)
    applying_now = ""
    if patched is not None:
        applying_now = "".join(
            difflib.unified_diff(
                text.splitlines(keepends=True),
                _with_line_ends(patched, text),
                fromfile=f"a/{plan.path}",
                tofile=f"b/{plan.path}",
            )
        )
    return {
        "size": len(content),
        "content": text,
        "plan_applies": patched is not None,
        "applying_now": applying_now,
    }


def _with_line_ends(lines: list[str], original: str) -> list[str]:
    """The patched lines with line ends, the last one ending as the file's does now."""
    ended = [line + "\n" for line in lines]
    if ended and not original.endswith("\n"):
        ended[-1] = ended[-1][:-1]
    return ended
