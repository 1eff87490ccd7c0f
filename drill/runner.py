"""``python -m drill`` (``make drill``): bring the stack up, run every drill, write the
evidence, take the stack down (also on failure or Ctrl-C), exit non-zero unless it all held."""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time
import traceback
from pathlib import Path
from types import FrameType
from typing import Any

from drill.stack import ROOT, Stack

OUTPUT = ROOT / "var"


def _interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def _setup(stack: Stack) -> Any:
    """Tenants, tokens, a human approver, and the downstream adapters the workers use.

    Done with the ORM in this process: it is what an operator does once, not a runtime call.
    """
    import django

    # This process sits idle between drills: its connection must not be cut for idling.
    os.environ.update(
        stack.env(DATABASE_IDLE_SESSION_TIMEOUT_MS="0", DATABASE_IDLE_IN_TRANSACTION_TIMEOUT_MS="0")
    )
    django.setup()
    from django.contrib.auth import get_user_model

    from agent_ledger_client import LedgerClient
    from drill.context import ADAPTERS, DrillContext
    from drill.context import Tenant as DrillTenant
    from drill.drills.rollback import VERSIONS
    from ledger.models import ApiToken, Membership, Tenant, Tool
    from ledger.permissions import SERVICE_ACCOUNT_SCOPES
    from reconcile.models import DownstreamAdapter

    tenant = Tenant.objects.create(slug="drill", name="Drill Co")
    other = Tenant.objects.create(slug="drill-other", name="Someone Else")
    # The drills drive a runtime's calls and a manager's changes with one service token.
    scopes = sorted(SERVICE_ACCOUNT_SCOPES)
    _t, token = ApiToken.issue(tenant=tenant, name="drill-runtime", scopes=scopes)
    _o, other_token = ApiToken.issue(tenant=other, name="other-runtime", scopes=scopes)
    approver = get_user_model().objects.create_user("drill-approver", password=None)
    Membership.objects.create(user=approver, tenant=tenant, role="approver")
    with LedgerClient(stack.web_url, token, request_timeout=15) as client:
        client.register_tool("create_order")
        client.register_tool("charge_customer")
        client.register_tool(
            "create_ticket",
            idempotency="non_idempotent",
            key_scope="business",
            description="Open a support ticket.",
            # The ticket service must answer with its ticket number; without it the result is
            # malformed, not a success.
            output_schema={"type": "object", "required": ["id", "ticket_number"]},
        )
        # Every run is pinned to a version combination, so the evidence names one.
        baseline = client.request(
            "POST", "/combinations", json={"label": "drill-baseline", **VERSIONS["baseline"]}
        )
        client.request("POST", f"/combinations/{baseline['id']}/activate")
    for tool_name, service in ADAPTERS.items():
        DownstreamAdapter.objects.create(
            tenant=tenant,
            tool=Tool.objects.get(tenant=tenant, name=tool_name),
            url_template=f"{stack.sandbox_url}/{service}/objects/by-key/{{key}}",
            found_statuses=[200],
            not_found_statuses=[404],
            grace_seconds=5,
            timeout_seconds=5,
        )
    return DrillContext(
        stack=stack,
        tenant=DrillTenant("drill", token),
        other_tenant=DrillTenant("drill-other", other_token),
        approver_username=approver.get_username(),
    )


def _settle_leftovers(ctx: Any, client: Any, results: list[Any], timeout: float = 60) -> None:
    """Give reconciliation time to settle what the drills left unknown (a drill that does not
    wait for its look-ups is collected before a busy worker got to them), then record the
    outcomes as they are. Whatever is still unknown and was not handed to a human is lost."""
    pending = {
        key: result
        for result in results
        for key, record in result.records.items()
        if record.get("state") == "unknown" and key not in result.left_for_human
    }
    if not pending:
        return
    settled = ctx.wait_records(client, list(pending), timeout=timeout)
    for key, record in settled.items():
        if record is not None:
            pending[key].records[key].update(
                state=record["state"],
                executions=record["executions"],
                duplicate_hits=record["duplicate_hits"],
            )
            pending[key].facts.setdefault("settled_after_the_drill", {})[key] = record["state"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Run the failure drills against the stack.")
    parser.add_argument(
        "-k",
        dest="only",
        default="",
        help="only drills whose name contains one of these (comma-separated)",
    )
    parser.add_argument("--output", type=Path, default=OUTPUT)
    parser.add_argument(
        "--postgres",
        default="postgres://postgres@127.0.0.1:5432",
        help="the PostgreSQL server (no database name); the drill creates its own database",
    )
    args = parser.parse_args(argv)
    started = time.monotonic()
    signal.signal(signal.SIGTERM, _interrupt)
    stack = Stack(workdir=args.output / "drill", pg_url=args.postgres.rstrip("/"))
    results = []
    report: dict[str, Any] | None = None
    try:
        print(f"drill: starting the stack (logs in {stack.logs})", flush=True)
        stack.start()
        ctx = _setup(stack)
        from drill.drills import all_drills
        from drill.report import DrillResult, build_report, summary, write_report

        for drill in all_drills():
            if args.only and not any(part in drill.name for part in args.only.split(",")):
                continue
            result = DrillResult(drill.name, drill.group, drill.description)
            began = time.monotonic()
            try:
                drill.run(ctx, result)
            except Exception as exc:
                result.error = f"{type(exc).__name__}: {exc}"
                result.facts["traceback"] = traceback.format_exc()[-4000:]
            try:
                ctx.clear_faults()
                with ctx.client() as client:
                    ctx.collect(client, result)
            except Exception as exc:
                result.error = result.error or f"collecting evidence: {exc!r}"
            result.seconds = round(time.monotonic() - began, 1)
            result.finish()
            results.append(result)
            print(
                f"drill: {'pass' if result.passed else 'FAIL'} {drill.name} ({result.seconds} s)",
                flush=True,
            )
        with ctx.client() as client:
            _settle_leftovers(ctx, client, results)
        report = build_report(
            results,
            started=started,
            stack={
                "description": "PostgreSQL, a private redis-server, gunicorn (2 workers), "
                "2 Celery workers, celery beat and the sandbox, as separate processes",
                "database": stack.database,
                "web_url": stack.web_url,
                "web_workers": stack.web_workers,
                "celery_workers": 2,
                "processes": sorted(stack.processes),
            },
        )
        json_path, md_path = write_report(report, args.output)
        print(summary(report))
        print(f"drill: evidence in {json_path} and {md_path}", flush=True)
    except KeyboardInterrupt:
        print("drill: interrupted; stopping the stack", file=sys.stderr, flush=True)
        return 130
    except Exception:
        traceback.print_exc()
        for process in stack.processes.values():
            if not process.running() and process.name != "redis":
                print(f"--- {process.name} log ---\n{process.log_tail()}", file=sys.stderr)
        return 1
    finally:
        if "django.db" in sys.modules:
            from django.db import connections

            connections.close_all()
        stack.stop()
    return 0 if report is not None and report["passed"] else 1
