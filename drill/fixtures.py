"""Seed 001's regression fixtures (``tests/regression/*.json``) and the field-by-field comparison
that judges a run against them.

A fixture holds the input (the steps an agent takes), and what must come out: the structured
observations, the tool trajectory and the side-effect records. ``compare`` walks the expected
value and reports every field that differs, by path; fields the fixture does not name are not
judged (call ids and timestamps differ on every run). Two markers stand for values that cannot
be fixed in advance: ``"$present"`` (the field exists and is not null) and ``"$nonempty"``
(it exists and is truthy).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from drill.stack import ROOT

FIXTURES = ROOT / "tests" / "regression"
GROUPS = ("normal", "rejected", "timeout", "cancelled", "duplicate")
_MISSING = object()


def load_fixtures(directory: Path = FIXTURES) -> list[dict[str, Any]]:
    """Every fixture, in the order of seed 001's five groups; each must name its group."""
    fixtures = [json.loads(path.read_text()) for path in sorted(directory.glob("*.json"))]
    for fixture in fixtures:
        for required in ("name", "group", "steps", "expected"):
            if required not in fixture:
                raise ValueError(f"fixture {fixture.get('name', '?')} has no {required!r}")
        if fixture["group"] not in GROUPS:
            raise ValueError(f"fixture {fixture['name']}: unknown group {fixture['group']!r}")
    return sorted(fixtures, key=lambda f: (GROUPS.index(f["group"]), f["name"]))


def compare(expected: Any, actual: Any, path: str = "") -> list[str]:
    """Every difference between ``expected`` and ``actual``, as ``path: expected ..., got ...``.

    Dicts are compared on the expected keys, lists element by element and by length, anything
    else by equality (``True`` is not ``1``).
    """
    here = path or "$"
    if expected == "$present":
        return [] if actual is not _MISSING and actual is not None else [f"{here}: missing"]
    if expected == "$nonempty":
        return [] if actual is not _MISSING and actual else [f"{here}: empty or missing"]
    if actual is _MISSING:
        return [f"{here}: expected {expected!r}, missing"]
    if isinstance(expected, dict):
        if not isinstance(actual, dict):
            return [f"{here}: expected an object, got {actual!r}"]
        problems: list[str] = []
        for key, value in expected.items():
            problems += compare(value, actual.get(key, _MISSING), f"{path}.{key}" if path else key)
        return problems
    if isinstance(expected, list):
        if not isinstance(actual, list):
            return [f"{here}: expected a list, got {actual!r}"]
        problems = []
        if len(expected) != len(actual):
            problems.append(f"{here}: expected {len(expected)} items, got {len(actual)}")
        for index, (want, got) in enumerate(zip(expected, actual, strict=False)):
            problems += compare(want, got, f"{here}[{index}]")
        return problems
    if type(expected) is not type(actual) or expected != actual:
        return [f"{here}: expected {expected!r}, got {actual!r}"]
    return []
