"""Rollback under load (seed 001 "上线与回滚"): a candidate combination goes bad while its
runs are in flight. Stop new runs, deal with the in-flight ones, restore the whole previous
combination, and check every pending side effect."""

from __future__ import annotations

import threading
from typing import Any

from agent_ledger_client import CallContext, LedgerClient
from drill.context import DrillContext
from drill.drills import Drill
from drill.report import DrillResult

GROUP = "rollback"
VERSIONS = {
    "baseline": {
        "model": "drill-model-1",
        "prompt": "support-v1",
        "rules": "rules-1",
        "tool_schema": "tools-1",
        "data_version": "data-1",
    },
    "candidate": {
        "model": "drill-model-2",
        "prompt": "support-v2",
        "rules": "rules-2",
        "tool_schema": "tools-2",
        "data_version": "data-1",
    },
}
RUNS = 4


def _combination(client: LedgerClient, label: str) -> dict[str, Any]:
    created: dict[str, Any] = client.request(
        "POST", "/combinations", json={"label": f"drill-{label}", **VERSIONS[label]}
    )
    return created


def halt_while_runs_are_in_flight(ctx: DrillContext, result: DrillResult) -> None:
    client = ctx.client()
    baseline = _combination(client, "baseline")
    candidate = _combination(client, "candidate")
    client.request("POST", f"/combinations/{baseline['id']}/activate")
    client.request("POST", f"/combinations/{candidate['id']}/activate")
    result.facts["combinations"] = {"baseline": baseline["id"], "candidate": candidate["id"]}

    # Two orders answer slowly (they complete after the rollback), two time out after
    # committing (their outcome is unknown, for the workers to look up).
    ctx.arm(service="orders", mode="latency", latency_ms=2500, count=2)
    ctx.arm(service="orders", mode="timeout_after_commit", hang_seconds=2.5, count=2)
    in_flight = threading.Barrier(RUNS + 1)
    lock = threading.Lock()
    outcomes: dict[str, dict[str, Any]] = {}
    errors: list[str] = []

    def signal_in_flight(call: CallContext) -> None:
        in_flight.wait(20)

    def agent(index: int) -> None:
        try:
            with ctx.client(agent=f"candidate-{index}") as own:
                run = own.start_run(user_id=f"rollback-{index}")
                with lock:
                    result.add_run(run.run_id)
                mine: dict[str, Any] = {"combination_id": run.data["combination_id"]}
                mine["charge"] = run.call(
                    "charge_customer",
                    {"cart": f"rb-{index}", "amount": 10},
                    business_object_id=f"rb-charge-{index}",
                    execute=ctx.create("payments", f"rb-charge-{index}"),
                )
                mine["order"] = run.call(
                    "create_order",
                    {"cart": f"rb-{index}"},
                    business_object_id=f"rb-order-{index}",
                    execute=ctx.create(
                        "orders", f"rb-order-{index}", timeout=4.0, before=signal_in_flight
                    ),
                    timeout=5,
                )
                # The next step, after the rollback: the run is halted.
                mine["email"] = run.call(
                    "send_email",
                    {"template": "receipt"},
                    business_object_id=f"rb-mail-{index}",
                    execute=ctx.create("email", f"rb-mail-{index}", send_key=False),
                )
                with lock:
                    outcomes[run.run_id] = mine
        except Exception as exc:
            errors.append(f"agent {index}: {exc!r}")

    agents = [threading.Thread(target=agent, args=(i,), daemon=True) for i in range(RUNS)]
    for thread in agents:
        thread.start()
    in_flight.wait(30)  # every run is in the middle of its order
    report = client.request(
        "POST",
        f"/combinations/{candidate['id']}/rollback",
        json={"reason": "drill: candidate goes bad under load"},
    )
    for thread in agents:
        thread.join(60)
    result.facts["rollback"] = report

    # New runs start under the restored combination, and work.
    after = client.start_run(user_id="rollback-after")
    result.add_run(after.run_id)
    fresh = result.observe(
        "new run",
        after.call(
            "create_order",
            {"cart": "rb-after"},
            business_object_id="rb-after",
            execute=ctx.create("orders", "rb-after"),
        ),
    )
    after.finish("completed")

    order_keys = []
    for run_id, mine in sorted(outcomes.items()):
        for step in ("charge", "order", "email"):
            result.observe(f"{run_id}:{step}", mine[step])
        order_keys.append(mine["order"]["metadata"]["idempotency_key"])
    records = ctx.wait_records(client, order_keys, timeout=60)
    email_keys = [m["email"]["metadata"].get("idempotency_key") for m in outcomes.values()]
    emails = ctx.stats("email")["per_reference"]
    orders = ctx.stats("orders")
    result.facts["agent_errors"] = errors
    result.check(
        "all runs ran under the candidate",
        not errors
        and len(outcomes) == RUNS
        and {m["combination_id"] for m in outcomes.values()} == {candidate["id"]},
        errors or [m["combination_id"] for m in outcomes.values()],
    )
    result.check(
        "the rollback halted every in-flight run",
        sorted(report["halted_runs"]) == sorted(outcomes),
        report["halted_runs"],
    )
    result.check(
        "the rollback listed the in-flight side effects",
        len(report["executing"]) + len(report["unknown"]) >= RUNS,
        report,
    )
    result.check(
        "the previous combination was restored", report["restored"] == baseline["id"], report
    )
    result.check(
        "in-flight runs' next call: RUN_HALTED",
        all(m["email"]["code"] == "RUN_HALTED" for m in outcomes.values()),
        [m["email"].get("code") for m in outcomes.values()],
    )
    result.check(
        "no mail was sent by a halted run",
        sum(emails.get(k or "", 0) for k in email_keys) == 0,
        email_keys,
    )
    result.check(
        "every pending order reconciled to succeeded",
        all(r is not None and r["state"] == "succeeded" for r in records.values()),
        records,
    )
    result.check(
        "one order per key",
        all(orders["per_reference"].get(k) == 1 for k in order_keys),
        {k: orders["per_reference"].get(k) for k in order_keys},
    )
    result.check(
        "a new run uses the previous combination",
        after.data["combination_id"] == baseline["id"],
        after.data,
    )
    result.check("and works", fresh["ok"] is True, fresh)
    client.close()


DRILLS = [
    Drill(
        "rollback_under_load",
        GROUP,
        "halt a combination with runs in flight: RUN_HALTED, reconcile, previous combination",
        halt_while_runs_are_in_flight,
    ),
]
