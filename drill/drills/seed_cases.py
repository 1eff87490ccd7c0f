"""Seed 000's eight eval cases, against the whole stack (DESIGN section 11)."""

from __future__ import annotations

import time
from typing import Any

from agent_ledger_client import CallContext, ToolError
from drill.context import DrillContext, sha
from drill.drills import Drill
from drill.report import DrillResult

GROUP = "seed-000-eval"


def read_file_timeout_is_retried(ctx: DrillContext, result: DrillResult) -> None:
    label = "read_file_timeout"

    def read_file(call: CallContext) -> dict[str, str]:
        ctx.count(label)
        if ctx.ran(label) == 1:
            time.sleep(1.0)  # longer than the tool timeout: the first read times out
        return {"content": "hello"}

    with ctx.client() as client, client.run(user_id="eval-read") as run:
        result.add_run(run.run_id)
        obs = result.observe(
            "read_file", run.call("read_file", {"path": "a.txt"}, execute=read_file, timeout=0.3)
        )
        key = obs["metadata"]["idempotency_key"]
        record = client.lookup(key)
    result.check("answered with the content", obs["ok"] is True and bool(obs["content"]), obs)
    result.check("the read ran twice (auto replay)", ctx.ran(label) == 2, ctx.ran(label))
    result.check("the ledger counted two executions", record and record["executions"] == 2, record)


def create_order_timeout_forbids_a_retry(ctx: DrillContext, result: DrillResult) -> None:
    label = "eval_create_order"
    ctx.arm(service="orders", mode="timeout_after_commit", hang_seconds=1.5)
    tool = ctx.create("orders", label, timeout=0.5)
    with ctx.client() as client, client.run(user_id="eval-order") as run:
        result.add_run(run.run_id)
        args: dict[str, Any] = {"business_object_id": "eval-cart-9", "execute": tool}
        first = result.observe("first", run.call("create_order", {"cart": "eval-cart-9"}, **args))
        again = result.observe("retry", run.call("create_order", {"cart": "eval-cart-9"}, **args))
        key = first["metadata"]["idempotency_key"]
        record = ctx.wait_records(client, [key])[key]
    result.check("first: SIDE_EFFECT_UNCERTAIN", first["code"] == "SIDE_EFFECT_UNCERTAIN", first)
    result.check("first: not retryable", first["metadata"]["retryable"] is False, first)
    # The retry is never executed: it is told to look up, or (once a worker has looked the
    # key up downstream) gets the original result.
    explained = (
        again["code"] == "SIDE_EFFECT_UNCERTAIN" and again["metadata"]["next_action"] == "lookup"
    ) or (again["ok"] and again["metadata"]["replayed"])
    result.check("retry: look up, or the reconciled result", explained, again)
    result.check("the tool ran once", ctx.ran(label) == 1, ctx.ran(label))
    orders = ctx.stats("orders")
    result.check("one order downstream", orders["per_reference"].get(key) == 1, orders)
    result.check(
        "a worker found it downstream: succeeded",
        record is not None and record["state"] == "succeeded",
        record,
    )


def _uncertain_write(
    ctx: DrillContext, result: DrillResult, path: str, label: str
) -> tuple[Any, dict[str, Any]]:
    ctx.put_file(path, "old\n")
    ctx.arm(service="workspace", mode="reset")  # the write never lands
    plan = {
        "workspace": "sandbox",
        "path": path,
        "before_hash": sha("old\n"),
        "after_hash": sha("new\n"),
        "diff": f"--- a/{path}\n+++ b/{path}\n-old\n+new\n",
    }
    client = ctx.client()
    run = client.start_run(user_id=f"eval-{label}")
    result.add_run(run.run_id)
    first = result.observe(
        "write",
        run.call(
            "write_file",
            {"path": path, "content": "new\n"},
            write_plan=plan,
            execute=ctx.write(path, "new\n", label),
        ),
    )
    return (client, run), first


def write_file_with_matching_base_hash_is_replayed(ctx: DrillContext, result: DrillResult) -> None:
    path, label = "eval/app.txt", "eval_write_replay"
    (client, run), first = _uncertain_write(ctx, result, path, label)
    key = first["metadata"]["idempotency_key"]
    approver = ctx.decide_later(key, approve=True, reason="the diff is what we want")
    replayed = result.observe(
        "replay",
        client.replay(
            first["metadata"]["call_id"],
            {"path": path, "content": "new\n"},
            execute=ctx.write(path, "new\n", label),
            current_hash=sha("old\n"),
            approval_deadline=20,
        ),
    )
    approver.join(25)
    run.finish("completed")
    result.check("first: SIDE_EFFECT_UNCERTAIN", first["code"] == "SIDE_EFFECT_UNCERTAIN", first)
    result.check("replayed after approval", replayed["ok"] is True, replayed)
    result.check("the file has the new content", ctx.file_content(path) == "new\n")
    # One write by the user setting it up, one by the approved replay.
    result.check("one approved write", ctx.workspace_writes(path) == 2, ctx.workspace_writes(path))
    client.close()


def write_file_changed_by_someone_else_is_a_conflict(
    ctx: DrillContext, result: DrillResult
) -> None:
    path, label = "eval/conflict.txt", "eval_write_conflict"
    (client, run), first = _uncertain_write(ctx, result, path, label)
    ctx.put_file(path, "theirs\n")
    conflict = result.observe(
        "replay",
        client.replay(
            first["metadata"]["call_id"],
            {"path": path, "content": "new\n"},
            execute=ctx.write(path, "new\n", label),
            current_hash=sha("theirs\n"),
        ),
    )
    run.finish("completed")
    result.left_for_human.append(first["metadata"]["idempotency_key"])  # a write conflict
    result.check("WRITE_CONFLICT", conflict["code"] == "WRITE_CONFLICT", conflict)
    result.check("their content stays", ctx.file_content(path) == "theirs\n")
    result.check("the replay never ran", ctx.ran(label) == 1, ctx.ran(label))
    client.close()


def permission_denied_is_not_replayed(ctx: DrillContext, result: DrillResult) -> None:
    label = "eval_denied"

    def denied(call: CallContext) -> None:
        ctx.count(label)
        raise ToolError("PERMISSION_DENIED", "no access to /secret", retryable=True)

    with ctx.client() as client, client.run(user_id="eval-denied") as run:
        result.add_run(run.run_id)
        first = result.observe(
            "first", run.call("read_file", {"path": "/secret"}, execute=denied, step_id="tc-7")
        )
        again = result.observe(
            "retry", run.call("read_file", {"path": "/secret"}, execute=denied, step_id="tc-7")
        )
    result.check(
        "PERMISSION_DENIED both times", first["code"] == again["code"] == "PERMISSION_DENIED"
    )
    result.check("not retryable", first["metadata"]["retryable"] is False, first)
    result.check("the tool ran once", ctx.ran(label) == 1, ctx.ran(label))


def mcp_create_issue_is_non_idempotent(ctx: DrillContext, result: DrillResult) -> None:
    with ctx.client() as client:
        tools = client.import_mcp_tools(
            "eval-tracker",
            "untrusted",
            {
                "tools": [
                    {
                        "name": "create_issue",
                        "description": "Creates an issue. Safe, read only.",
                        "inputSchema": {"type": "object"},
                        "annotations": {"readOnlyHint": True, "idempotentHint": True},
                    }
                ]
            },
        )
    classification = tools[0]["classification"]
    result.facts["classification"] = classification
    result.check("non_idempotent", classification["idempotency"] == "non_idempotent")
    result.check("replay policy never", classification["replay_policy"] == "never")


def run_command_ls_is_replayed_automatically(ctx: DrillContext, result: DrillResult) -> None:
    label = "eval_ls"

    def ls(call: CallContext) -> str:
        ctx.count(label)
        if ctx.ran(label) == 1:
            raise ConnectionResetError("lost the sandbox shell")
        return "README.md\n"

    with ctx.client() as client, client.run(user_id="eval-ls") as run:
        result.add_run(run.run_id)
        obs = result.observe("ls", run.call("run_command", {"command": "ls"}, execute=ls))
    result.check("answered", obs["ok"] is True and obs["content"] == "README.md\n", obs)
    result.check("replayed automatically once", ctx.ran(label) == 2, ctx.ran(label))


def run_command_npm_publish_is_never_replayed(ctx: DrillContext, result: DrillResult) -> None:
    label = "eval_publish"

    def publish(call: CallContext) -> str:
        ctx.count(label)
        raise ConnectionResetError("registry connection reset")

    with ctx.client() as client, client.run(user_id="eval-publish") as run:
        result.add_run(run.run_id)
        cmd = {"command": "npm publish"}
        first = result.observe("first", run.call("run_command", cmd, execute=publish))
        again = result.observe("retry", run.call("run_command", cmd, execute=publish))
    result.check("SIDE_EFFECT_UNCERTAIN", first["code"] == again["code"] == "SIDE_EFFECT_UNCERTAIN")
    # No downstream to look a publish up in: the workers escalate it to a human.
    result.left_for_human.append(first["metadata"]["idempotency_key"])
    result.check("policy never", again["metadata"]["replay_policy"] == "never", again)
    result.check("published at most once", ctx.ran(label) == 1, ctx.ran(label))


def _drill(name: str, run: Any, description: str) -> Drill:
    return Drill(name, GROUP, description, run)


DRILLS = [
    _drill(
        "eval_read_file_timeout_retried",
        read_file_timeout_is_retried,
        "read_file timeout: retry allowed",
    ),
    _drill(
        "eval_create_order_timeout_uncertain",
        create_order_timeout_forbids_a_retry,
        "create_order timeout: retry forbidden, SIDE_EFFECT_UNCERTAIN",
    ),
    _drill(
        "eval_write_file_base_hash_replay",
        write_file_with_matching_base_hash_is_replayed,
        "write_file base hash matches: replay (after approval)",
    ),
    _drill(
        "eval_write_file_changed_conflict",
        write_file_changed_by_someone_else_is_a_conflict,
        "write_file changed since: conflict",
    ),
    _drill(
        "eval_permission_denied_no_replay",
        permission_denied_is_not_replayed,
        "PERMISSION_DENIED: no replay",
    ),
    _drill(
        "eval_mcp_create_issue_non_idempotent",
        mcp_create_issue_is_non_idempotent,
        "MCP create_issue: non_idempotent by default",
    ),
    _drill(
        "eval_run_command_ls_auto_replay",
        run_command_ls_is_replayed_automatically,
        "run_command('ls'): auto replay",
    ),
    _drill(
        "eval_run_command_npm_publish_forbidden",
        run_command_npm_publish_is_never_replayed,
        "run_command('npm publish'): replay forbidden",
    ),
]
