"""Reading files for the write-plan check, confined to a registered workspace root."""

from __future__ import annotations

import hashlib
from pathlib import Path, PurePosixPath

from ledger.paths import workspace_path_problem

EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()


class PathRefused(ValueError):
    """The path would leave the workspace root (``..``, absolute, or a symlink out)."""


def confined_path(root: str | Path, relative: str) -> Path:
    """``root/relative``, refusing anything that resolves outside ``root``."""
    problem = workspace_path_problem(relative)
    if problem is not None:
        raise PathRefused(f"{relative!r}: {problem}")
    pure = PurePosixPath(relative)
    base = Path(root).resolve(strict=True)
    target = (base / pure).resolve()  # follows symlinks, wherever they point
    if not target.is_relative_to(base):
        raise PathRefused(f"{relative!r} leads outside the workspace (a symlink?)")
    return target


def file_sha256(root: str | Path, relative: str) -> str:
    """The file's sha256 now; a missing file hashes as empty (a write that creates it)."""
    target = confined_path(root, relative)
    if not target.exists():
        return EMPTY_SHA256
    digest = hashlib.sha256()
    with target.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 16), b""):
            digest.update(block)
    return digest.hexdigest()
