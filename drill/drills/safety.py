"""Bad input and bad downstreams: unauthorized input, malformed downstream data, and a write
nobody approved. Each must change nothing it is not allowed to change."""

from __future__ import annotations

import time
from typing import Any

import httpx

from agent_ledger_client import LedgerClient, LedgerRequestError
from drill.context import DrillContext, sha
from drill.drills import Drill
from drill.report import DrillResult

GROUP = "input-and-downstream-faults"


def _status(call: Any) -> int | None:
    """The HTTP status a client request was refused with (None if it was not refused)."""
    try:
        call()
    except LedgerRequestError as refused:
        return refused.status
    return None


def unauthorized_input(ctx: DrillContext, result: DrillResult) -> None:
    """No token, a forged token, another tenant's token, and input the API must refuse:
    every one refused, and none of them touches the tenant's call or its side effect."""
    label = "unauthorized_victim"
    with ctx.client() as client, client.run(user_id="victim") as run:
        result.add_run(run.run_id)
        obs = result.observe(
            "victim",
            run.call(
                "create_order",
                {"cart": "victim-cart"},
                business_object_id="victim-cart",
                execute=ctx.create("orders", label),
            ),
        )
        key, call_id = obs["metadata"]["idempotency_key"], obs["metadata"]["call_id"]
        before = client.lookup(key)
        api = f"{ctx.stack.web_url}/api/v1"
        body = {"run_id": run.run_id, "step_id": "s1", "tool": "create_order", "input": {}}
        refusals: dict[str, Any] = {}
        refusals["no_token"] = httpx.post(f"{api}/calls", json=body, timeout=10).status_code
        with LedgerClient(ctx.stack.web_url, "al_forged-token-0123456789") as forged:
            refusals["forged_token"] = _status(lambda: forged.start_run(user_id="intruder"))
        with ctx.client(token=ctx.other_tenant.token, agent="intruder") as other:
            refusals["other_tenant_reads_call"] = _status(lambda: other.get_call(call_id))
            refusals["other_tenant_reads_record"] = other.lookup(key)
            refusals["other_tenant_completes_call"] = _status(
                lambda: other.request(
                    "POST",
                    f"/calls/{call_id}/complete",
                    json={"fencing_token": 1, "outcome": "failed", "error": {"code": "X"}},
                )
            )
            refusals["other_tenant_uses_run"] = _status(
                lambda: other.request("POST", "/calls", json=body)
            )
        headers = {"Authorization": f"Bearer {ctx.tenant.token}"}
        refusals["malformed_json"] = httpx.post(
            f"{api}/calls",
            content=b'{"run_id": ',
            headers={**headers, "Content-Type": "application/json"},
            timeout=10,
        ).status_code
        refusals["html_tool_name"] = httpx.post(
            f"{api}/calls",
            json={**body, "tool": "<script>alert(1)</script>"},
            headers=headers,
            timeout=10,
        ).status_code
        refusals["oversized_body"] = httpx.post(
            f"{api}/calls",
            json={**body, "input": {"blob": "x" * (2 * 1024 * 1024)}},
            headers=headers,
            timeout=10,
        ).status_code
        after = client.lookup(key)
    result.facts["refusals"] = refusals
    result.check("no token: 401", refusals["no_token"] == 401, refusals)
    result.check("forged token: 401", refusals["forged_token"] == 401, refusals)
    result.check("another tenant cannot see the call", refusals["other_tenant_reads_call"] == 404)
    result.check(
        "another tenant cannot see the record", refusals["other_tenant_reads_record"] is None
    )
    result.check(
        "another tenant cannot complete the call",
        refusals["other_tenant_completes_call"] == 404,
        refusals,
    )
    result.check(
        "another tenant cannot call in the run", refusals["other_tenant_uses_run"] == 404, refusals
    )
    result.check("malformed JSON: 400", refusals["malformed_json"] == 400, refusals)
    result.check("HTML in a tool name: 400", refusals["html_tool_name"] == 400, refusals)
    result.check("oversized body: 413", refusals["oversized_body"] == 413, refusals)
    result.check(
        "the victim's record is unchanged", before == after, {"before": before, "after": after}
    )
    orders = ctx.stats("orders")
    result.check("one order, made by the victim", orders["per_reference"].get(key) == 1)


def malformed_downstream_data(ctx: DrillContext, result: DrillResult) -> None:
    """The order service commits and answers with a broken body, then its first look-up is
    broken too; a ticket service answers with data that fails the tool's output schema. None
    is taken for a success; the workers settle both from the downstream's records."""
    from reconcile.models import ReconcileAttempt

    ctx.arm(service="orders", mode="malformed")
    ctx.arm(service="orders", operation="lookup", mode="malformed")
    with ctx.client() as client, client.run(user_id="malformed") as run:
        result.add_run(run.run_id)
        broken = result.observe(
            "broken body",
            run.call(
                "create_order",
                {"cart": "malformed-cart"},
                business_object_id="malformed-cart",
                execute=ctx.create("orders", "malformed_order"),
            ),
        )
        off_schema = result.observe(
            "off schema",
            run.call(
                "create_ticket",
                {"title": "printer on fire"},
                business_object_id="ticket-1",
                execute=ctx.create("issues", "malformed_ticket"),
            ),
        )
        keys = [broken["metadata"]["idempotency_key"], off_schema["metadata"]["idempotency_key"]]
        records = ctx.wait_records(client, keys, timeout=45)
    attempts = list(
        ReconcileAttempt.objects.filter(record__key=keys[0]).values_list("outcome", flat=True)
    )
    result.facts["order_lookups"] = attempts
    result.check(
        "a broken body is not a success",
        broken["ok"] is False and broken["code"] == "SIDE_EFFECT_UNCERTAIN",
        broken,
    )
    result.check(
        "a result off the output schema is not a success",
        off_schema["ok"] is False and off_schema["code"] == "SIDE_EFFECT_UNCERTAIN",
        off_schema,
    )
    result.check("a broken look-up was tried again", attempts[:1] == ["malformed"], attempts)
    result.check(
        "both settled from the downstream's records",
        all(r is not None and r["state"] == "succeeded" for r in records.values()),
        records,
    )
    result.check(
        "each tool ran once", ctx.ran("malformed_order") == 1 and ctx.ran("malformed_ticket") == 1
    )
    counts = [
        ctx.stats("orders")["per_reference"].get(keys[0]),
        ctx.stats("issues")["per_reference"].get(keys[1]),
    ]
    result.check("one object each downstream", counts == [1, 1], counts)


def unapproved_write(ctx: DrillContext, result: DrillResult) -> None:
    """A write that must be approved before it is replayed: while nobody approves, and after
    the approver rejects it (asking again is refused with the reason), the file is
    untouched."""
    path, label = "unapproved/settings.yaml", "unapproved_write"
    before, after = "mode: safe\n", "mode: fast\n"
    ctx.put_file(path, before)
    baseline = ctx.workspace_writes(path)
    ctx.arm(service="workspace", mode="reset")
    plan = {
        "workspace": "sandbox",
        "path": path,
        "before_hash": sha(before),
        "after_hash": sha(after),
        "diff": f"-{before}+{after}",
    }
    with ctx.client() as client:
        run = client.start_run(user_id="unapproved")
        result.add_run(run.run_id)
        first = result.observe(
            "write",
            run.call(
                "update_config",
                {"path": path, "content": after},
                write_plan=plan,
                execute=ctx.write(path, after, label),
            ),
        )
        call_id, key = first["metadata"]["call_id"], first["metadata"]["idempotency_key"]
        waiting = result.observe(
            "replay, nobody approves",
            client.replay(
                call_id,
                {"path": path, "content": after},
                execute=ctx.write(path, after, f"{label}-r1"),
                current_hash=sha(before),
                approval_deadline=2,
            ),
        )
        # The approver rejects the pending request; the model asks once more after that.
        decided = ctx.decide(key, approve=False, reason="Not during the freeze.")
        asked_at = time.monotonic()
        rejected = result.observe(
            "replay after the rejection",
            client.replay(
                call_id,
                {"path": path, "content": after},
                execute=ctx.write(path, after, f"{label}-r2"),
                current_hash=sha(before),
                approval_deadline=20,
            ),
        )
        answered_in = time.monotonic() - asked_at
        run.finish("write not approved")
    writes = ctx.workspace_writes(path) - baseline
    result.unapproved_write_side_effects = writes
    result.left_for_human.append(key)  # rejected: the write stays undone until someone decides
    result.check("no approval: APPROVAL_REQUIRED", waiting["code"] == "APPROVAL_REQUIRED", waiting)
    result.check("the approver rejected the pending request", decided)
    result.check(
        "asked again: APPROVAL_REJECTED with the reason, at once (not a new request)",
        rejected["code"] == "APPROVAL_REJECTED"
        and "freeze" in rejected["content"]
        and answered_in < 5,
        {"observation": rejected, "seconds": round(answered_in, 2)},
    )
    result.check("the replays never ran", ctx.ran(f"{label}-r1") + ctx.ran(f"{label}-r2") == 0)
    result.check("zero writes to the file", writes == 0, writes)
    result.check("the file is untouched", ctx.file_content(path) == before)


DRILLS = [
    Drill(
        "unauthorized_input",
        GROUP,
        "no/forged/foreign tokens and bad input change nothing",
        unauthorized_input,
    ),
    Drill(
        "malformed_downstream_data",
        GROUP,
        "broken and off-schema downstream answers are never a success",
        malformed_downstream_data,
    ),
    Drill(
        "unapproved_write_zero_side_effects",
        GROUP,
        "a write nobody approved has zero side effects",
        unapproved_write,
    ),
]
