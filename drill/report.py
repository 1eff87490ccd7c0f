"""The evidence a drill leaves behind, and the totals judged from it.

Every number in the totals is computed from structured fields of the drill results (records
as the ledger reports them, side effects as the sandbox downstreams count them, observation
codes), never from text. ``compute_totals`` is plain Python so it can be tested on its own.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any


@dataclass
class Check:
    name: str
    passed: bool
    detail: Any = None


@dataclass
class DrillResult:
    """One drill: what it did, what it saw, and whether every check held."""

    name: str
    group: str
    description: str = ""
    passed: bool = False
    run_ids: list[str] = field(default_factory=list)
    #: run id -> {"combination": {...} | None, "status": ..., "termination_reason": ...}
    runs: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: The version combinations the drill's runs ran under (id, label, fingerprint, versions).
    version_combinations: list[dict[str, Any]] = field(default_factory=list)
    #: run id -> how it ended ("completed", "cancelled by user", "combination rolled back", ...).
    termination_reasons: dict[str, str] = field(default_factory=dict)
    idempotency_keys: list[str] = field(default_factory=list)
    #: What the model was told, call by call (structured fields only).
    observations: list[dict[str, Any]] = field(default_factory=list)
    #: key -> the ledger's record: state, executions, duplicate_hits.
    records: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: key -> service -> {"objects": n, "create_requests": m}, as the downstream counts them.
    side_effects: dict[str, dict[str, dict[str, int]]] = field(default_factory=dict)
    #: Side effects of writes that no human approved (must be 0).
    unapproved_write_side_effects: int = 0
    #: Keys the drill deliberately leaves unknown for a human (anything else unknown is lost).
    left_for_human: list[str] = field(default_factory=list)
    checks: list[Check] = field(default_factory=list)
    facts: dict[str, Any] = field(default_factory=dict)
    error: str | None = None
    seconds: float = 0.0

    def check(self, name: str, passed: object, detail: Any = None) -> bool:
        """Record one assertion; the drill passes only if every check passes."""
        self.checks.append(Check(name, bool(passed), detail))
        return bool(passed)

    def add_run(self, run_id: str) -> None:
        if run_id not in self.run_ids:
            self.run_ids.append(run_id)

    def add_key(self, key: str | None) -> None:
        if key and key not in self.idempotency_keys:
            self.idempotency_keys.append(key)

    def observe(self, label: str, observation: dict[str, Any]) -> dict[str, Any]:
        """Keep the structured part of an observation (and its key); returns it unchanged."""
        metadata = observation.get("metadata") or {}
        self.observations.append(
            {
                "call": label,
                "ok": observation.get("ok"),
                "code": observation.get("code"),
                "replayed": metadata.get("replayed"),
                "retryable": metadata.get("retryable"),
                "next_action": metadata.get("next_action"),
                "idempotency": metadata.get("idempotency"),
                "replay_policy": metadata.get("replay_policy"),
                "idempotency_key": metadata.get("idempotency_key"),
                "call_id": metadata.get("call_id"),
                "explained": bool(observation.get("content")),
            }
        )
        self.add_key(metadata.get("idempotency_key"))
        return observation

    def finish(self) -> None:
        self.passed = (
            self.error is None and bool(self.checks) and all(c.passed for c in self.checks)
        )


TOTAL_FIELDS = (
    "dedup_hit_rate",
    "uncertain_count",
    "duplicate_side_effects",
    "downstream_records_max_per_key",
    "unapproved_write_side_effects",
)


def compute_totals(results: list[DrillResult]) -> dict[str, Any]:
    """The report's totals, from the drills' structured fields.

    - ``dedup_hit_rate``: keyed requests answered from an existing record / keyed requests,
      where a record's requests are its executions plus its duplicate hits (DESIGN section 9);
    - ``uncertain_count``: observations that told the model ``SIDE_EFFECT_UNCERTAIN``;
    - ``duplicate_side_effects``: downstream objects beyond the first, per idempotency key;
    - ``downstream_records_max_per_key``: the most downstream objects any one key produced;
    - ``unapproved_write_side_effects``: side effects of writes nobody approved.
    """
    records: dict[str, dict[str, Any]] = {}
    objects: dict[tuple[str, str], int] = {}
    for result in results:
        records.update(result.records)
        for key, services in result.side_effects.items():
            for service, counts in services.items():
                objects[(service, key)] = max(
                    objects.get((service, key), 0), int(counts.get("objects", 0))
                )
    hits = sum(int(r.get("duplicate_hits") or 0) for r in records.values())
    executions = sum(int(r.get("executions") or 0) for r in records.values())
    requests = hits + executions
    per_key = [n for n in objects.values() if n > 0]
    return {
        "drills": len(results),
        "passed": sum(1 for r in results if r.passed),
        "failed": sum(1 for r in results if not r.passed),
        "keyed_requests": requests,
        "dedup_hits": hits,
        "dedup_hit_rate": round(hits / requests, 4) if requests else 0.0,
        "uncertain_count": sum(
            1 for r in results for o in r.observations if o.get("code") == "SIDE_EFFECT_UNCERTAIN"
        ),
        "unknown_records_at_end": sum(1 for r in records.values() if r.get("state") == "unknown"),
        "unknown_not_left_for_human": sum(
            1
            for result in results
            for key, record in result.records.items()
            if record.get("state") == "unknown" and key not in result.left_for_human
        ),
        "duplicate_side_effects": sum(n - 1 for n in per_key if n > 1),
        "downstream_records_max_per_key": max(per_key, default=0),
        "unapproved_write_side_effects": sum(r.unapproved_write_side_effects for r in results),
    }


def acceptance(totals: dict[str, Any]) -> list[str]:
    """Why the run fails the issue's acceptance bar (an empty list: it passes)."""
    problems = []
    if totals["failed"]:
        problems.append(f"{totals['failed']} drill(s) failed")
    if totals["duplicate_side_effects"] != 0:
        problems.append(f"duplicate_side_effects = {totals['duplicate_side_effects']}, not 0")
    if totals["downstream_records_max_per_key"] != 1:
        problems.append(
            f"downstream_records_max_per_key = {totals['downstream_records_max_per_key']}, not 1"
        )
    if totals["unknown_not_left_for_human"] != 0:
        problems.append(
            f"{totals['unknown_not_left_for_human']} unknown outcome(s) nobody settled or "
            "handed to a human"
        )
    if totals["unapproved_write_side_effects"] != 0:
        problems.append(
            f"unapproved_write_side_effects = {totals['unapproved_write_side_effects']}, not 0"
        )
    return problems


def build_report(
    results: list[DrillResult], *, started: float, stack: dict[str, Any]
) -> dict[str, Any]:
    totals = compute_totals(results)
    problems = acceptance(totals)
    return {
        "passed": not problems,
        "problems": problems,
        "seconds": round(time.monotonic() - started, 1),
        "stack": stack,
        "totals": totals,
        # Outcomes still unknown at the end: each must be one a drill left for a human.
        "unknown_at_end": [
            {
                "drill": r.name,
                "key": key,
                "tool": record.get("tool"),
                "left_for_human": key in r.left_for_human,
            }
            for r in results
            for key, record in r.records.items()
            if record.get("state") == "unknown"
        ],
        "drills": [asdict(r) for r in results],
    }


def summary(report: dict[str, Any]) -> str:
    """A readable summary (Markdown) of a report."""
    totals = report["totals"]
    verdict = "PASSED" if report["passed"] else "FAILED"
    lines = [
        f"# Drill report: {verdict}",
        "",
        f"{totals['passed']}/{totals['drills']} drills passed in {report['seconds']} s "
        f"against {report['stack'].get('description', 'the stack')}.",
        "",
    ]
    for problem in report["problems"]:
        lines.append(f"- **{problem}**")
    lines += ["", "| total | value |", "|---|---|"]
    lines += [
        f"| `{name}` | {totals[name]} |"
        for name in (
            *TOTAL_FIELDS,
            "unknown_records_at_end",
            "unknown_not_left_for_human",
        )
    ]
    lines += [
        "",
        "| drill | group | result | runs | combinations | keys | seconds |",
        "|---|---|---|---|---|---|---|",
    ]
    for drill in report["drills"]:
        labels = ", ".join(c["label"] for c in drill["version_combinations"]) or "-"
        lines.append(
            f"| {drill['name']} | {drill['group']} | {'pass' if drill['passed'] else 'FAIL'} "
            f"| {len(drill['run_ids'])} | {labels} | {len(drill['idempotency_keys'])} "
            f"| {drill['seconds']} |"
        )
    if report.get("unknown_at_end"):
        lines += ["", "Still unknown at the end:", ""]
        lines += [
            f"- {u['drill']}: `{u['tool']}` `{u['key']}` "
            + ("(left for a human by the drill)" if u["left_for_human"] else "**(lost)**")
            for u in report["unknown_at_end"]
        ]
    failed = [d for d in report["drills"] if not d["passed"]]
    for drill in failed:
        lines += ["", f"## {drill['name']} failed", ""]
        if drill["error"]:
            lines.append(f"- error: `{drill['error']}`")
        for check in drill["checks"]:
            if not check["passed"]:
                lines.append(f"- check `{check['name']}` failed: `{check['detail']!r}`")
    return "\n".join(lines) + "\n"


def write_report(report: dict[str, Any], directory: Path) -> tuple[Path, Path]:
    directory.mkdir(parents=True, exist_ok=True)
    json_path = directory / "drill.json"
    md_path = directory / "drill.md"
    json_path.write_text(json.dumps(report, indent=2, default=str) + "\n")
    md_path.write_text(summary(report))
    return json_path, md_path
