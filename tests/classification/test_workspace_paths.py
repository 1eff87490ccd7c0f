"""Which registered workspace root covers a whole-file write's path: the part of the path under
the root follows the one rule for a path inside a workspace (``ledger.paths``), so a path the
worker's check would refuse is never classified ``conditional``."""

from __future__ import annotations

import pytest

from ledger.classification.files import covering_root
from ledger.paths import workspace_path_problem


@pytest.mark.parametrize(
    ("path", "roots", "root"),
    [
        ("/ws/a.txt", ["/ws"], "/ws"),
        ("/ws/sub/a.txt", ["/other", "/ws"], "/ws"),
        ("/ws/a.txt", ["/ws/"], "/ws/"),
        ("/ws/a.txt", ["/"], "/"),
        ("/wsx/a.txt", ["/ws"], None),
        ("ws/a.txt", ["/ws"], None),
        ("/ws/a.txt", ["ws"], None),
        ("/ws/a.txt", ["/x/../ws"], None),
    ],
)
def test_a_root_covers_the_paths_under_it(path: str, roots: list[str], root: str | None) -> None:
    assert covering_root(path, roots) == root


@pytest.mark.parametrize(
    "relative",
    ["a\\b", "a\nb", "a\x00b", "a\x7fb", "../etc/passwd", "sub/../a", "./a", "sub//a", "a/", ""],
)
def test_a_path_the_workspace_rule_refuses_is_covered_by_no_root(relative: str) -> None:
    assert workspace_path_problem(relative) is not None
    assert covering_root(f"/ws/{relative}", ["/ws"]) is None
