"""Regression fixtures are compared field by field, and the five groups all have one."""

from __future__ import annotations

from drill.fixtures import GROUPS, compare, load_fixtures


def test_equal_values_have_no_differences() -> None:
    expected = {"ok": True, "metadata": {"replayed": False}, "items": [1, 2]}
    actual = {"ok": True, "metadata": {"replayed": False, "call_id": "c-1"}, "items": [1, 2]}
    assert compare(expected, actual) == []


def test_every_differing_field_is_named_by_its_path() -> None:
    expected = {
        "output": [{"ok": True, "metadata": {"replayed": True}}],
        "side_effects": {"orders": 1},
    }
    actual = {"output": [{"ok": False, "metadata": {}}], "side_effects": {"orders": 2}}
    assert compare(expected, actual) == [
        "output[0].ok: expected True, got False",
        "output[0].metadata.replayed: expected True, missing",
        "side_effects.orders: expected 1, got 2",
    ]


def test_types_are_compared_strictly() -> None:
    assert compare({"n": 1}, {"n": True}) == ["n: expected 1, got True"]
    assert compare({"n": None}, {"n": 0}) == ["n: expected None, got 0"]


def test_lists_must_have_the_same_length() -> None:
    assert compare([1, 2], [1, 2, 3]) == ["$: expected 2 items, got 3"]


def test_markers_for_values_that_change_every_run() -> None:
    assert compare({"key": "$nonempty"}, {"key": "agent:t:u:tool:x"}) == []
    assert compare({"key": "$nonempty"}, {"key": ""}) == ["key: empty or missing"]
    assert compare({"id": "$present"}, {}) == ["id: missing"]


def test_the_five_regression_groups_have_fixtures() -> None:
    fixtures = load_fixtures()
    assert [f["group"] for f in fixtures] == list(GROUPS)
    for fixture in fixtures:
        expected = fixture["expected"]
        assert {"output", "trajectory", "side_effects"} <= set(expected)
        assert len(expected["output"]) == len(expected["trajectory"]) == len(fixture["steps"])
