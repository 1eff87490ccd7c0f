"""The drill report's totals are computed from structured fields, and judge the acceptance."""

from __future__ import annotations

from drill.report import DrillResult, acceptance, compute_totals


def _drill(name: str, *, passed: bool = True, **fields: object) -> DrillResult:
    result = DrillResult(name, "group")
    for field, value in fields.items():
        setattr(result, field, value)
    result.check("held", passed)
    result.finish()
    return result


def test_dedup_hit_rate_is_hits_over_keyed_requests() -> None:
    one = _drill("a", records={"k1": {"state": "succeeded", "executions": 1, "duplicate_hits": 10}})
    two = _drill("b", records={"k2": {"state": "succeeded", "executions": 1, "duplicate_hits": 0}})
    totals = compute_totals([one, two])
    assert (totals["keyed_requests"], totals["dedup_hits"]) == (12, 10)
    assert totals["dedup_hit_rate"] == round(10 / 12, 4)


def test_uncertain_count_counts_uncertain_observations() -> None:
    result = _drill("a")
    result.observe("x", {"ok": False, "code": "SIDE_EFFECT_UNCERTAIN", "content": "c"})
    result.observe("y", {"ok": False, "code": "IN_PROGRESS", "content": "c"})
    result.observe("z", {"ok": True, "content": "c", "metadata": {"replayed": True}})
    assert compute_totals([result])["uncertain_count"] == 1


def test_a_second_object_for_one_key_is_a_duplicate_side_effect() -> None:
    clean = _drill("a", side_effects={"k1": {"orders": {"objects": 1, "create_requests": 1}}})
    doubled = _drill(
        "b",
        side_effects={
            "k2": {"email": {"objects": 3, "create_requests": 0}},
            "k3": {"orders": {"objects": 1, "create_requests": 2}},
        },
    )
    totals = compute_totals([clean, doubled])
    assert totals["duplicate_side_effects"] == 2
    assert totals["downstream_records_max_per_key"] == 3
    assert acceptance(totals) == [
        "duplicate_side_effects = 2, not 0",
        "downstream_records_max_per_key = 3, not 1",
    ]


def test_a_key_seen_by_two_drills_is_counted_once() -> None:
    effects = {"k1": {"orders": {"objects": 1, "create_requests": 1}}}
    totals = compute_totals([_drill("a", side_effects=effects), _drill("b", side_effects=effects)])
    assert totals["duplicate_side_effects"] == 0
    assert totals["downstream_records_max_per_key"] == 1


def test_acceptance_needs_every_drill_passed_and_no_unapproved_writes() -> None:
    effects = {"k1": {"orders": {"objects": 1, "create_requests": 1}}}
    good = _drill("a", side_effects=effects)
    assert acceptance(compute_totals([good])) == []
    failed = _drill("b", passed=False)
    unapproved = _drill("c", unapproved_write_side_effects=1)
    problems = acceptance(compute_totals([good, failed, unapproved]))
    assert problems == ["1 drill(s) failed", "unapproved_write_side_effects = 1, not 0"]


def test_a_drill_without_checks_or_with_an_error_has_not_passed() -> None:
    empty = DrillResult("a", "group")
    empty.finish()
    crashed = _drill("b")
    crashed.error = "TimeoutError: waiting for the sandbox"
    crashed.finish()
    assert not empty.passed and not crashed.passed


def test_an_unknown_outcome_nobody_handed_to_a_human_fails_the_run() -> None:
    unknown = {"state": "unknown", "executions": 1, "duplicate_hits": 0}
    effects = {"k1": {"orders": {"objects": 1, "create_requests": 1}}}
    handed = _drill("a", records={"k1": unknown}, side_effects=effects, left_for_human=["k1"])
    assert acceptance(compute_totals([handed])) == []
    lost = _drill("b", records={"k2": unknown}, side_effects=effects)
    totals = compute_totals([handed, lost])
    assert (totals["unknown_records_at_end"], totals["unknown_not_left_for_human"]) == (2, 1)
    assert acceptance(totals) == ["1 unknown outcome(s) nobody settled or handed to a human"]
