"""Seed 001's five regression groups, replayed from their JSON fixtures and judged field by
field: the structured output of every step, the tool trajectory, the ledger's records and the
side effects as the downstreams count them."""

from __future__ import annotations

import re
from typing import Any

from agent_ledger_client import LedgerClient, LedgerRequestError, Run
from drill.context import DrillContext, sha
from drill.drills import Drill
from drill.fixtures import compare, load_fixtures
from drill.report import DrillResult

GROUP = "seed-001-regression"


class _Replayer:
    """Runs one fixture's steps through the client and keeps what came out of each."""

    def __init__(self, ctx: DrillContext, result: DrillResult, fixture: dict[str, Any]) -> None:
        self.ctx = ctx
        self.result = result
        self.fixture = fixture
        self.outputs: list[Any] = []
        self.trajectory: list[dict[str, Any]] = []
        self.keys: list[str | None] = []
        self.call_ids: list[str | None] = []
        self.tools: list[str | None] = []
        self.paths: set[str] = set()

    def run(self, client: LedgerClient) -> None:
        for path, content in self.fixture.get("setup_files", {}).items():
            self.ctx.put_file(path, content)
            self.paths.add(path)
        self.write_baseline = {p: self.ctx.workspace_writes(p) for p in self.paths}
        run = client.start_run(user_id=f"regression-{self.fixture['name']}")
        self.result.add_run(run.run_id)
        for index, step in enumerate(self.fixture["steps"]):
            label = f"regression_{self.fixture['name']}_{index}"
            getattr(self, f"_{step['action']}")(client, run, step, label)
        finished = self.fixture.get("finish")
        if finished:
            run.finish(finished)
        elif client.request("GET", f"/runs/{run.run_id}")["status"] == "running":
            run.finish("completed")

    def _keep(
        self, step: dict[str, Any], tool: str | None, output: Any, executed: bool, key: str | None
    ) -> None:
        self.outputs.append(output)
        ok = output.get("ok") if isinstance(output, dict) else None
        code = output.get("code") if isinstance(output, dict) else None
        self.trajectory.append(
            {"action": step["action"], "tool": tool, "executed": executed, "ok": ok, "code": code}
        )
        self.keys.append(key)
        self.tools.append(tool)
        if isinstance(output, dict) and "metadata" in output:
            self.result.observe(f"step-{len(self.outputs) - 1}", output)
            self.call_ids.append(output["metadata"].get("call_id"))
        else:
            self.call_ids.append(None)

    def _execute_for(self, step: dict[str, Any], label: str) -> Any:
        if step.get("downstream"):
            return self.ctx.create(step["downstream"], label, timeout=step.get("timeout", 5.0))
        plan = step.get("write_plan")
        if plan:
            self.paths.add(plan["path"])
            return self.ctx.write(plan["path"], plan["after"], label)
        return self.ctx.local(label, step.get("result"))

    def _call(self, client: LedgerClient, run: Run, step: dict[str, Any], label: str) -> None:
        if step.get("fault"):
            self.ctx.arm(**step["fault"])
        options: dict[str, Any] = {}
        if step.get("business_object_id"):
            options["business_object_id"] = step["business_object_id"]
        if step.get("timeout"):
            options["timeout"] = step["timeout"]
        plan = step.get("write_plan")
        if plan:
            options["write_plan"] = {
                "workspace": "sandbox",
                "path": plan["path"],
                "before_hash": sha(plan["before"]),
                "after_hash": sha(plan["after"]),
                "diff": f"-{plan['before']}+{plan['after']}",
            }
        execute = self._execute_for(step, label)
        try:
            output: dict[str, Any] = run.call(
                step["tool"], step["input"], execute=execute, **options
            )
        except LedgerRequestError as refused:
            output = {
                "ok": False,
                "code": refused.problem.get("code"),
                "http_status": refused.status,
            }
        key = (output.get("metadata") or {}).get("idempotency_key")
        self._keep(step, step["tool"], output, self.ctx.ran(label) > 0, key)

    def _replay(self, client: LedgerClient, run: Run, step: dict[str, Any], label: str) -> None:
        original = self.fixture["steps"][step["of"]]
        call_id, key = self.call_ids[step["of"]], self.keys[step["of"]]
        assert call_id is not None and key is not None
        approval = step.get("approval")
        decider = (
            self.ctx.decide_later(key, approve=approval["approve"], reason=approval["reason"])
            if approval
            else None
        )
        output = client.replay(
            call_id,
            original["input"],
            execute=self._execute_for(original, label),
            current_hash=sha(step["current_content"]) if "current_content" in step else None,
            approval_deadline=20 if approval else 1,
        )
        if decider is not None:
            decider.join(25)
        self._keep(step, original["tool"], output, self.ctx.ran(label) > 0, key)

    def _settle(self, client: LedgerClient, run: Run, step: dict[str, Any], label: str) -> None:
        key = self.keys[step["of"]]
        assert key is not None
        record = self.ctx.wait_records(client, [key], timeout=45)[key]
        output = {"record_state": record["state"] if record else None}
        self.outputs.append(output)
        self.trajectory.append(
            {
                "action": "settle",
                "tool": self.tools[step["of"]],
                "executed": False,
                "ok": None,
                "code": None,
            }
        )
        self.keys.append(key)
        self.tools.append(self.tools[step["of"]])
        self.call_ids.append(None)

    def _cancel(self, client: LedgerClient, run: Run, step: dict[str, Any], label: str) -> None:
        finished = run.finish(step["reason"])
        self.outputs.append(
            {"status": finished["status"], "termination_reason": finished["termination_reason"]}
        )
        self.trajectory.append(
            {"action": "cancel", "tool": None, "executed": False, "ok": None, "code": None}
        )
        self.keys.append(None)
        self.tools.append(None)
        self.call_ids.append(None)

    def actual(self, client: LedgerClient) -> dict[str, Any]:
        """What came out, in the fixture's ``expected`` shape."""
        records = []
        for key in self.keys:
            record = client.lookup(key) if key else None
            records.append(
                {k: record[k] for k in ("state", "executions", "duplicate_hits")}
                if record
                else None
            )
        keys = {k for k in self.keys if k}
        side_effects: dict[str, int] = {}
        for service in ("orders", "payments", "email", "issues"):
            per_reference = self.ctx.stats(service)["per_reference"]
            side_effects[service] = sum(per_reference.get(k, 0) for k in keys)
        side_effects["workspace_writes"] = sum(
            self.ctx.workspace_writes(p) - self.write_baseline.get(p, 0) for p in self.paths
        )
        run_id = self.result.run_ids[-1]
        return {
            "output": self.outputs,
            "trajectory": self.trajectory,
            "records": records,
            "side_effects": side_effects,
            "file_contents": {p: self.ctx.file_content(p) for p in sorted(self.paths)},
            "termination_reason": client.request("GET", f"/runs/{run_id}")["termination_reason"],
        }


def _regression(fixture: dict[str, Any]) -> Drill:
    def drill(ctx: DrillContext, result: DrillResult) -> None:
        replayer = _Replayer(ctx, result, fixture)
        with ctx.client() as client:
            replayer.run(client)
            actual = replayer.actual(client)
        mismatches = compare(fixture["expected"], actual)
        for key, record in zip(replayer.keys, fixture["expected"].get("records", []), strict=False):
            if key and record and record.get("state") == "unknown":
                result.left_for_human.append(key)  # the fixture says it stays unknown
        result.facts["fixture"] = f"tests/regression/{fixture['name']}.json"
        result.facts["actual"] = actual
        result.facts["mismatches"] = mismatches
        for field in fixture["expected"]:
            wrong = [m for m in mismatches if re.match(r"[a-z_]+", m)[0] == field]  # type: ignore[index]
            result.check(f"{field} matches the fixture", not wrong, wrong)
        if any(not (s.get("approval") or {}).get("approve", True) for s in fixture["steps"]):
            # A write whose replay was rejected: anything it wrote was never approved.
            result.unapproved_write_side_effects = actual["side_effects"]["workspace_writes"]

    return Drill(f"regression_{fixture['name']}", GROUP, fixture.get("description", ""), drill)


def drills() -> list[Drill]:
    return [_regression(fixture) for fixture in load_fixtures()]
