"""Progressive rollout (seed 001 "达到门槛后逐步放量"): a plan ramps a candidate combination by
steps while real runs go through the stack, judged by the beat-driven evaluation. A healthy
candidate reaches 100% by itself; a candidate whose orders end uncertain at its 10% step is
halted and rolled back within one evaluation interval, and the evidence names each step with
its measured metrics."""

from __future__ import annotations

import contextlib
import itertools
import threading
import time
from typing import Any

from agent_ledger_client import LedgerClient, LedgerRequestError
from drill.context import DrillContext
from drill.drills import Drill
from drill.report import DrillResult
from drill.stack import WORKER_ENV

GROUP = "rollout"
VERSIONS = {
    "good": {"model": "drill-model-3", "prompt": "support-v3"},
    "bad": {"model": "drill-model-4", "prompt": "support-v4"},
}
PINNED = {"rules": "rules-1", "tool_schema": "tools-1", "data_version": "data-1"}
INTERVAL = float(WORKER_ENV["ROLLOUT_EVALUATE_SECONDS"])
_ids = itertools.count(1)


def _run_ids(share_bp: int, *, on_candidate: bool, count: int) -> list[str]:
    """Run ids that fall inside (or outside) a share of new runs, as any run's id does."""
    from ledger.services.runs import canary_bucket

    ids: list[str] = []
    while len(ids) < count:
        run_id = f"rollout-{next(_ids)}"
        if (canary_bucket(run_id) < share_bp) == on_candidate:
            ids.append(run_id)
    return ids


def _orders(
    ctx: DrillContext, client: LedgerClient, result: DrillResult, run_ids: list[str]
) -> list[dict[str, Any]]:
    """One order per run, all at once (each run in a thread of its own, as agents run); the
    observations, each with the run's combination."""
    seen: dict[str, dict[str, Any]] = {}

    def agent(run_id: str) -> None:
        with ctx.client(agent="rollout") as own:
            run = own.start_run(user_id="rollout", run_id=run_id)
            observation = run.call(
                "create_order",
                {"cart": run_id},
                business_object_id=f"{run_id}-order",
                execute=ctx.create("orders", run_id, timeout=2.0),
                timeout=2.5,
            )
            seen[run_id] = {**observation, "combination_id": run.data["combination_id"]}
            # A run halted by a rollback meanwhile has ended that way already.
            with contextlib.suppress(LedgerRequestError):
                run.finish("completed")

    agents = [threading.Thread(target=agent, args=(run_id,), daemon=True) for run_id in run_ids]
    for thread in agents:
        thread.start()
    for thread in agents:
        thread.join(30)
    for run_id in run_ids:
        result.add_run(run_id)
        if run_id in seen:
            result.observe(run_id, seen[run_id])
    return [seen.get(run_id, {}) for run_id in run_ids]


def _plan_until(client: LedgerClient, plan_id: int, done: Any, timeout: float) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    plan: dict[str, Any] = client.request("GET", f"/rollouts/{plan_id}")
    while not done(plan) and time.monotonic() < deadline:
        time.sleep(0.3)
        plan = client.request("GET", f"/rollouts/{plan_id}")
    return plan


def ramp_up_and_halt(ctx: DrillContext, result: DrillResult) -> None:
    client = ctx.client(agent="rollout")
    combos = {
        label: client.request(
            "POST",
            "/combinations",
            json={"label": f"drill-rollout-{label}", **versions, **PINNED},
        )
        for label, versions in VERSIONS.items()
    }
    # The gate: any uncertain result of the candidate during a step crosses it.
    client.request("POST", "/thresholds", json={"metric": "uncertain_results", "above": 0})
    steps = [
        {"share_bp": 1000, "min_samples": 2},
        {"share_bp": 5000, "min_samples": 2},
        {"share_bp": 10_000},
    ]
    good = client.request(
        "POST", "/rollouts", json={"candidate_id": combos["good"]["id"], "steps": steps}
    )
    for share in (1000, 5000):
        _orders(
            ctx,
            client,
            result,
            _run_ids(share, on_candidate=True, count=2)
            + _run_ids(share, on_candidate=False, count=1),
        )
        position = next(s["position"] for s in good["steps"] if s["share_bp"] == share)
        good = _plan_until(
            client, good["id"], lambda p, n=position: p["current_step"] > n, 6 * INTERVAL
        )
    result.facts["healthy_plan"] = good
    result.check(
        "a healthy candidate advances to 100% by itself",
        good["state"] == "completed" and [s["state"] for s in good["steps"]] == ["passed"] * 3,
        good,
    )
    result.check(
        "each passed step carries its measured metrics",
        all(
            s["analysis"].get("samples", 0) >= 2
            and s["analysis"]["metrics"]["became_uncertain"] == 0
            for s in good["steps"][:2]
        ),
        [s["analysis"] for s in good["steps"]],
    )
    active = client.request("GET", f"/combinations/{combos['good']['id']}")
    result.check("the healthy candidate is active", active["state"] == "active", active)

    bad = client.request(
        "POST",
        "/rollouts",
        json={"candidate_id": combos["bad"]["id"], "steps": [steps[0], steps[2]]},
    )
    # The candidate's orders commit downstream and their answers time out: unknown outcomes.
    ctx.arm(service="orders", mode="timeout_after_commit", hang_seconds=3, count=2)
    uncertain = _orders(ctx, client, result, _run_ids(1000, on_candidate=True, count=2))
    reported = time.monotonic()
    bad = _plan_until(client, bad["id"], lambda p: p["state"] != "running", 3 * INTERVAL + 10)
    took = time.monotonic() - reported
    result.facts["halted_plan"] = bad
    result.facts["seconds_to_halt"] = round(took, 1)
    halted = client.request("GET", f"/combinations/{combos['bad']['id']}")
    result.check(
        "the candidate's orders ran under it and ended uncertain",
        all(
            o["combination_id"] == combos["bad"]["id"] and o.get("code") == "SIDE_EFFECT_UNCERTAIN"
            for o in uncertain
        ),
        uncertain,
    )
    result.check(
        "a crossed threshold at the 10% step halts the plan within one evaluation interval",
        bad["state"] == "halted"
        and bad["steps"][0]["state"] == "failed"
        and took <= INTERVAL + 5,  # the metrics roll-up and the request itself
        {"plan": bad, "seconds": took, "interval": INTERVAL},
    )
    verdicts = bad["steps"][0]["analysis"].get("verdicts", [])
    result.check(
        "the failed step names the crossed threshold and its observed value",
        any(v["verdict"] == "crossed" and (v["observed"] or 0) >= 1 for v in verdicts),
        verdicts,
    )
    result.check("the candidate is halted (rolled back)", halted["state"] == "halted", halted)
    after = client.start_run(
        user_id="rollout-after", run_id=_run_ids(1000, on_candidate=True, count=1)[0]
    )
    result.add_run(after.run_id)
    result.check(
        "new runs go to the active combination, never the halted candidate",
        after.data["combination_id"] == combos["good"]["id"],
        after.data,
    )
    after.finish("completed")
    client.close()


DRILLS = [
    Drill(
        "rollout_gated_by_thresholds",
        GROUP,
        "a plan 10% -> 50% -> 100%: a healthy candidate advances by itself; one whose results "
        "turn uncertain at 10% is halted and rolled back within one evaluation interval",
        ramp_up_and_halt,
    ),
]
