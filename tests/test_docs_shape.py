"""The README is read in five minutes and the docs hold the detail (STYLE.md habit 14): README.md
stays under 200 lines, no Markdown table cell in README.md or docs/ runs past two sentences
(300 characters), and every relative link and image there reaches a file, and a heading where
it names one."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
README_MAX_LINES = 200
CELL_MAX_CHARS = 300

_FENCE = re.compile(r"^\s*(```|~~~)")
_LINK = re.compile(r"!?\[(?:[^\]\\]|\\.)*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
_CODE_SPAN = re.compile(r"(`+).+?\1")
_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")


def _prose_lines(text: str) -> list[tuple[int, str]]:
    """The lines of a Markdown page outside fenced code blocks, numbered from 1."""
    lines, fenced = [], False
    for number, line in enumerate(text.splitlines(), start=1):
        if _FENCE.match(line):
            fenced = not fenced
        elif not fenced:
            lines.append((number, line))
    return lines


def table_cells(text: str) -> list[tuple[int, str]]:
    """Every cell of every table row (a line that starts with ``|``), as GitHub splits it: on
    each ``|`` that no backslash escapes, inside code spans too."""
    cells = []
    for number, line in _prose_lines(text):
        row = line.strip()
        if not row.startswith("|"):
            continue
        row = row.removeprefix("|")
        row = row[:-1] if row.endswith("|") and not row.endswith("\\|") else row
        cells.extend((number, cell.strip()) for cell in re.split(r"(?<!\\)\|", row))
    return cells


def slug(heading: str) -> str:
    """The anchor GitHub gives a heading: its text without Markdown, lower case, with only
    letters, digits, ``_``, ``-`` and spaces kept, and spaces made hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)
    text = text.replace("`", "").replace("*", "")
    text = re.sub(r"[^\w\- ]", "", text.lower())
    return text.replace(" ", "-")


def anchors(text: str) -> set[str]:
    """The anchors of a page's headings; a repeated heading gets ``-1``, ``-2``... as on
    GitHub."""
    found: set[str] = set()
    seen: dict[str, int] = {}
    for _, line in _prose_lines(text):
        match = _HEADING.match(line)
        if match is None:
            continue
        base = slug(match.group(2))
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(base if count == 0 else f"{base}-{count}")
    return found


def broken_links(page: Path, root: Path = ROOT) -> list[str]:
    """The relative links and images of ``page`` (under ``root``) that name no file, or a
    heading its target lacks."""
    text = page.read_text()
    broken = []
    for number, line in _prose_lines(text):
        for target in _LINK.findall(_CODE_SPAN.sub("", line)):
            if re.match(r"[a-z][a-z0-9+.-]*:", target):
                continue  # http:, https:, mailto:
            path, _, anchor = target.partition("#")
            file = (page.parent / path).resolve() if path else page
            where = f"{page.relative_to(root)}:{number}: {target}"
            if not file.exists():
                broken.append(f"{where} (no such file)")
            elif anchor and file.suffix == ".md" and anchor not in anchors(file.read_text()):
                broken.append(f"{where} (no such heading)")
    return broken


def test_the_readme_is_under_200_lines() -> None:
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) < README_MAX_LINES, (
        f"README.md has {len(lines)} lines; move detail into docs/"
    )


@pytest.mark.parametrize("page", PAGES, ids=lambda page: str(page.relative_to(ROOT)))
def test_no_table_cell_runs_past_300_characters(page: Path) -> None:
    long = [
        f"{page.relative_to(ROOT)}:{number}: {len(cell)} characters: {cell[:60]}..."
        for number, cell in table_cells(page.read_text())
        if len(cell) > CELL_MAX_CHARS
    ]
    assert long == []


@pytest.mark.parametrize("page", PAGES, ids=lambda page: str(page.relative_to(ROOT)))
def test_every_relative_link_reaches_a_file_and_heading(page: Path) -> None:
    assert broken_links(page) == []


def test_the_readme_links_every_page_of_docs() -> None:
    readme = (ROOT / "README.md").read_text()
    linked = {target.partition("#")[0] for target in _LINK.findall(readme)}
    assert {f"docs/{page.name}" for page in PAGES[1:]} <= linked


@pytest.mark.parametrize(
    ("row", "cells"),
    [
        ("| a | b |", ["a", "b"]),
        ("| `x \\| y` | z |", ["`x \\| y`", "z"]),
        ("|---|---|", ["---", "---"]),
        ("not a row | at all", []),
    ],
)
def test_table_cells_split_as_github_does(row: str, cells: list[str]) -> None:
    assert [cell for _, cell in table_cells(row)] == cells


def test_cells_inside_code_blocks_are_not_table_cells() -> None:
    assert table_cells("```\n| " + "x" * 400 + " |\n```\n") == []


@pytest.mark.parametrize(
    ("heading", "anchor"),
    [
        ("A combination's lifecycle", "a-combinations-lifecycle"),
        ("Mutation testing (`make mutate`)", "mutation-testing-make-mutate"),
        (
            "Scale out: why N workers on M machines are safe",
            "scale-out-why-n-workers-on-m-machines-are-safe",
        ),
        ("Compensating actions (补偿动作)", "compensating-actions-补偿动作"),
    ],
)
def test_slugs_are_githubs(heading: str, anchor: str) -> None:
    assert slug(heading) == anchor


def test_a_link_to_a_missing_file_or_heading_is_broken(tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "b.md").write_text("# B\n\n## Present\n")
    page = tmp_path / "docs" / "a.md"
    page.write_text(
        "[ok](b.md#present) [here](#a) `[code](nowhere.md)`\n"
        "[gone](c.md) [no heading](b.md#absent) ![img](images/x.png)\n# A\n"
    )
    broken = broken_links(page, root=tmp_path)
    assert [entry.split(": ", 1)[1] for entry in broken] == [
        "c.md (no such file)",
        "b.md#absent (no such heading)",
        "images/x.png (no such file)",
    ]
