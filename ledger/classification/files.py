"""Whole-file writes (``write_file(path, content)``): replayable after a base-hash check.

Where a registered workspace root (``ledger.models.WorkspaceRoot``, handed in by the caller: the
classifier reads no table) covers the path, a reconcile worker can read the file and
compare its hash with the write plan's before and after hashes (DESIGN section 5), so the call
is ``conditional``/``ask`` whoever registered the tool: the hash, not the server's word,
decides a replay. Outside every root nothing can be checked, and the tool's own classification
stands.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import PurePosixPath

from django.utils.translation import gettext_noop

from ledger.classification import Classification
from ledger.domain import Idempotency
from ledger.paths import workspace_path_problem
from ledger.stored_text import StoredText

_NOT_COVERED = StoredText(
    gettext_noop(
        "%(reason)s No registered workspace root covers its '%(argument)s', so no base-hash "
        "check can run."
    ),
    texts=("reason",),
)
_UNDER_ROOT = StoredText(
    gettext_noop(
        "A whole-file write under the workspace root %(root)s: a replay is decided by the "
        "file's hash (already applied, apply again, or conflict)."
    )
)


def covering_root(path: str, roots: Iterable[str]) -> str | None:
    """The registered root that contains ``path``, if any: the part of ``path`` under it names
    a file inside a workspace by the one rule for such paths (``ledger.paths``), the rule the
    worker's check holds the write plan to. A relative path is covered by none: the server
    resolves it against a directory not known here."""
    return next((root for root in roots if _under(path, root)), None)


def _under(path: str, root: str) -> bool:
    base = PurePosixPath(root)
    if not base.is_absolute() or ".." in base.parts:
        return False
    prefix = str(base).rstrip("/") + "/"
    return path.startswith(prefix) and workspace_path_problem(path[len(prefix) :]) is None


def classify_file_write(
    path: object, roots: Iterable[str], *, stored: Classification, argument: str
) -> Classification:
    """A whole-file write's class for one call: ``conditional`` where a root covers ``path``."""
    root = covering_root(path, roots) if isinstance(path, str) else None
    if root is None:
        return Classification(
            stored.idempotency,
            stored.replay_policy,
            stored.destructive,
            _NOT_COVERED(reason=stored.reason, argument=argument),
            stored.rule,
        )
    return Classification.of(
        Idempotency.CONDITIONAL,
        reason=_UNDER_ROOT(root=root),
        rule="file_write.workspace",
        destructive=stored.destructive,
    )
