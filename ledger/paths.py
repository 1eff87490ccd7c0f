"""The one rule for a path inside a workspace (a write plan's ``path``, DESIGN section 5).

Relative, normalised, inside the workspace: no ``..``, nothing absolute, no drive letter, no
backslash (a Windows separator, or an escape), no control character. The reconcile worker
also resolves symlinks against the real root (``reconcile.filehash``).
"""

from __future__ import annotations

import posixpath
import re

_DRIVE = re.compile(r"^[A-Za-z]:")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def workspace_path_problem(path: str) -> str | None:
    """Why ``path`` cannot name a file inside a workspace, or None when it can."""
    if not path:
        return "the path is empty"
    if _CONTROL.search(path):
        return "the path holds a control character"
    if "\\" in path:
        return "the path holds a backslash; use '/' between folders"
    if path.startswith("/") or _DRIVE.match(path):
        return "the path is absolute; give it relative to the workspace root"
    if ".." in path.split("/"):
        return "the path climbs out of the workspace with '..'"
    if posixpath.normpath(path) != path:
        return f"the path is not normalised (as {posixpath.normpath(path)!r})"
    return None
