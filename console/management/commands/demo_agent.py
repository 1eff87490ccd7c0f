"""``manage.py demo_agent``: scripted agent runs that fill the ledger with real data.

No model is needed: each run is a script of tool calls made through the Python client over
HTTP, against the sandbox downstreams with faults injected. The command serves the ledger itself
on a free loopback port for the duration, so it works on the embedded PostgreSQL of ``make run``
as on any other; it calls the sandbox at ``--sandbox-url`` (``make run`` keeps one running, so
the workers can look the demo's calls up in it), or serves one of its own. Two version
combinations are used; the candidate one hits more faults, so its metrics are visibly worse. A
third, ``next``, is in shadow: every baseline run is mirrored by a shadow run under it, whose
side-effecting calls never execute (``ledger.shadow``), so the console's shadow comparison has
pairs to show.

Running it again adds more runs; ``make run`` runs it once, on an empty ledger. It runs only
with ``DEBUG`` on, and the token it issues is revoked when it ends, however it ends.
"""

from __future__ import annotations

import hashlib
import random
import threading
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta
from functools import partial
from pathlib import Path
from typing import Any

import httpx
from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.core.servers.basehttp import ThreadedWSGIServer, WSGIRequestHandler
from django.core.wsgi import get_wsgi_application
from django.db.models.functions import Now

from agent_ledger_client import CallContext, LedgerClient, Run, ToolError
from ledger import combinations
from ledger.clock import db_now
from ledger.models import (
    ApiToken,
    ApprovalRequest,
    AuditEvent,
    MetricBucket,
    ServiceAccount,
    Tenant,
    VersionCombination,
)
from ledger.permissions import Role
from ledger.records import decide_approval
from ledger.services import metrics
from ledger.services.audit import audit
from sandbox.server import SandboxServer, serve

#: Written last: a demo ledger without it is one a failed demo run left part-way.
DEMO_COMPLETED = "demo.completed"

COMBINATIONS = {
    "baseline": {
        "model": "gpt-demo-1",
        "prompt": "support-v1",
        "rules": "rules-2026.10",
        "tool_schema": "tools-v3",
        "data_version": "catalog-2026.11",
    },
    "candidate": {
        "model": "gpt-demo-2",
        "prompt": "support-v2",
        "rules": "rules-2026.10",
        "tool_schema": "tools-v3",
        "data_version": "catalog-2026.11",
    },
    "next": {
        "model": "gpt-demo-3",
        "prompt": "support-v3",
        "rules": "rules-2026.10",
        "tool_schema": "tools-v3",
        "data_version": "catalog-2026.11",
    },
}


#: The demo's history: 5-minute metric buckets over the day before its own runs, so every
#: chart has a shape. The candidate ships as a canary this long before the demo, and is worse.
HISTORY = timedelta(hours=24)
CANARY_FOR = timedelta(hours=6)


def backfill_history(
    tenant: Tenant, combinations: dict[str, VersionCombination], *, until: datetime
) -> int:
    """Metric buckets for ``create_order`` under each combination over ``HISTORY`` before the
    bucket of ``until`` (the demo's own traffic fills that one and later): steady for the
    baseline, and from ``CANARY_FOR`` back a smaller share for the candidate, with fewer dedup
    hits and more calls that became uncertain: the regression a manager rolls back. The
    numbers are drawn from a seeded generator, so each demo has the same history."""
    rng = random.Random(2026)  # noqa: S311 - demo numbers, not secrets
    end = metrics.bucket_of(until)
    steps = int(HISTORY / metrics.BUCKET)
    canary_from = end - CANARY_FOR
    rows = []
    for step in range(steps, 0, -1):
        bucket = end - step * metrics.BUCKET
        for label, combination in combinations.items():
            candidate = label == "candidate"
            if candidate and bucket < canary_from:
                continue
            keyed = rng.randint(4, 9) if candidate else rng.randint(18, 36)
            hits = round(
                keyed * rng.uniform(0.05, 0.15) if candidate else keyed * rng.uniform(0.2, 0.35)
            )
            uncertain = rng.choice([0, 1, 1, 2, 3]) if candidate else rng.choice([0, 0, 0, 0, 1])
            rows.append(
                MetricBucket(
                    tenant=tenant,
                    combination=combination,
                    tool_name="create_order",
                    bucket_start=bucket,
                    keyed_requests=keyed,
                    dedup_hits=hits,
                    executions=keyed - hits,
                    became_uncertain=uncertain,
                    decided_execute=keyed - hits,
                    decided_recorded_result=hits,
                )
            )
    MetricBucket.objects.bulk_create(rows, ignore_conflicts=True)
    return len(rows)


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def _outside_workspace(ctx: CallContext) -> None:
    raise ToolError("PERMISSION_DENIED", f"{ctx.input.get('path')} is outside the workspace")


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        return


@contextmanager
def _serving(sandbox_url: str) -> Iterator[tuple[str, str]]:
    """The ledger (this project's WSGI app) on a free loopback port, and the sandbox at
    ``sandbox_url`` (empty: one served here on a free port, gone when the demo ends; the one
    ``make run`` keeps running is what the workers look the demo's calls up in)."""
    ledger = ThreadedWSGIServer(("127.0.0.1", 0), _QuietHandler, allow_reuse_address=True)
    ledger.set_app(get_wsgi_application())
    servers: list[ThreadedWSGIServer | SandboxServer] = [ledger]
    if not sandbox_url:
        sandbox = serve("127.0.0.1", 0, Path(settings.VAR_DIR) / "workspaces" / "demo")
        servers.append(sandbox)
        sandbox_url = sandbox.url
    threads = [threading.Thread(target=s.serve_forever, daemon=True) for s in servers]
    for thread in threads:
        thread.start()
    try:
        yield f"http://127.0.0.1:{ledger.server_address[1]}", sandbox_url.rstrip("/")
    finally:
        for server in servers:
            server.shutdown()
            server.server_close()


class Demo:
    """One tenant's scripted runs. A ``mirroring`` demo drives shadow runs: the same tool
    calls, but it leaves the sandbox to the live run it mirrors (no faults, no setup)."""

    def __init__(
        self,
        client: LedgerClient,
        sandbox_url: str,
        out: Callable[[str], None],
        *,
        mirroring: bool = False,
    ):
        self.client = client
        self.sandbox_url = sandbox_url
        self.out = out
        self.mirroring = mirroring

    def fault(self, **fault: Any) -> None:
        if self.mirroring:
            return
        httpx.post(f"{self.sandbox_url}/_faults", json=fault, timeout=5).raise_for_status()

    def create(self, service: str, reference: str) -> Callable[[CallContext], Any]:
        def execute(ctx: CallContext) -> Any:
            response = httpx.post(
                f"{self.sandbox_url}/{service}/objects",
                json={"reference": reference, **ctx.input},
                headers={"Idempotency-Key": ctx.idempotency_key},
                timeout=1.5,
            )
            if response.status_code >= 500:
                raise ToolError(
                    "DOWNSTREAM_UNAVAILABLE",
                    f"{service} answered {response.status_code}",
                    retryable=True,
                )
            response.raise_for_status()
            return response.json()

        return execute

    def write(self, path: str, content: str) -> Callable[[CallContext], Any]:
        def execute(ctx: CallContext) -> Any:
            response = httpx.put(
                f"{self.sandbox_url}/workspace/files/{path}", json={"content": content}, timeout=1.5
            )
            response.raise_for_status()
            return response.json()

        return execute

    def script(self, run: Run, index: int, *, worse: bool) -> None:
        """One customer-support run: look up, order, charge, mail, edit a config file."""
        cart = f"cart-{run.run_id[:8]}"
        run.call("get_order_status", {"order": cart}, execute=lambda ctx: {"status": "open"})
        run.call("read_file", {"path": "README.md"}, execute=lambda ctx: {"content": "# Shop"})
        if worse or index % 3 == 0:
            self.fault(service="orders", mode="timeout_after_commit", hang_seconds=2.5)
        order = run.call(
            "create_order",
            {"cart": cart, "total": 42 + index},
            business_object_id=cart,
            execute=self.create("orders", cart),
            timeout=2.0,
        )
        # The model retries: a duplicate, answered from the ledger.
        run.call(
            "create_order",
            {"cart": cart, "total": 42 + index},
            business_object_id=cart,
            execute=self.create("orders", cart),
            timeout=2.0,
        )
        if order.get("ok"):
            if worse and index % 2 == 0:
                self.fault(service="payments", mode="reset_after_commit")
            run.call(
                "charge_customer",
                {"cart": cart, "amount": 42 + index},
                business_object_id=f"charge-{cart}",
                execute=self.create("payments", cart),
            )
        if index % 4 == 1:
            self.fault(service="email", mode="error_5xx")
        run.call(
            "send_email",
            {"to": f"customer-{index}@example.com", "template": "receipt"},
            business_object_id=f"receipt-{cart}",
            execute=self.create("email", cart),
        )
        if index % 5 == 2:
            run.call("read_file", {"path": "/etc/shadow"}, execute=_outside_workspace)
        run.call("run_command", {"command": "git status"}, execute=lambda ctx: "clean\n")
        self.config_edit(run, index)

    def config_edit(self, run: Run, index: int) -> None:
        """A conditional write whose response is lost: replay needs a check and an approval."""
        path = f"config/app-{index}.yaml"
        before, after = f"retries: {index}\n", f"retries: {index + 3}\n"
        if not self.mirroring:
            httpx.put(
                f"{self.sandbox_url}/workspace/files/{path}", json={"content": before}, timeout=5
            ).raise_for_status()
        self.fault(service="workspace", mode="reset")
        plan = {
            "workspace": "demo",
            "path": path,
            "before_hash": _sha(before),
            "after_hash": _sha(after),
            "diff": f"--- a/{path}\n+++ b/{path}\n@@ -1 +1 @@\n-{before}+{after}",
        }
        first = run.call(
            "update_config",
            {"path": path, "content": after},
            write_plan=plan,
            execute=self.write(path, after),
        )
        if first.get("code") != "SIDE_EFFECT_UNCERTAIN":
            return
        if index % 3 == 1:  # someone else edited the file meanwhile: a write conflict
            httpx.put(
                f"{self.sandbox_url}/workspace/files/{path}",
                json={"content": "retries: 99\n"},
                timeout=5,
            )
            self.client.replay(
                first["metadata"]["call_id"],
                {"path": path, "content": after},
                execute=self.write(path, after),
                current_hash=_sha("retries: 99\n"),
            )
            return
        # Ask for the approval and leave it pending for a human in the console.
        self.client.replay(
            first["metadata"]["call_id"],
            {"path": path, "content": after},
            execute=self.write(path, after),
            current_hash=_sha(before),
            approval_deadline=0,
        )


class Command(BaseCommand):
    help = "Drive scripted agent runs through the client against the sandbox (demo data)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--tenant", default="demo")
        parser.add_argument("--runs", type=int, default=6, help="runs per combination")
        parser.add_argument(
            "--if-empty", action="store_true", help="do nothing when the tenant already has runs"
        )
        parser.add_argument(
            "--sandbox-url",
            default="",
            help="a running sandbox to call (python -m sandbox); default: one of its own",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        if not settings.DEBUG:
            raise CommandError("demo_agent fills a ledger with demo data: DEBUG only.")
        tenant, _ = Tenant.objects.get_or_create(
            slug=options["tenant"], defaults={"name": "Demo Co"}
        )
        if options["if_empty"] and tenant.runs.exists():
            if AuditEvent.objects.filter(tenant=tenant, action=DEMO_COMPLETED).exists():
                self.stdout.write("The demo ledger already has runs; nothing to do.")
            else:
                self.stderr.write(
                    "The demo ledger is incomplete: an earlier demo run stopped part-way (its "
                    "error was printed then). For the full demo, delete var/ and run "
                    "`make run` again."
                )
            return
        combinations = self._combinations(tenant)
        started = db_now()
        runtime = ServiceAccount.named(tenant=tenant, name="demo-agent").user
        token, plaintext = ApiToken.issue(
            tenant=tenant, name=f"demo-agent-{uuid.uuid4().hex[:6]}", user=runtime
        )
        try:
            stats = self._drive(
                plaintext, combinations, runs=options["runs"], sandbox_url=options["sandbox_url"]
            )
        finally:
            ApiToken.objects.filter(pk=token.pk).update(revoked_at=Now())
        self._reject_one(tenant)
        metrics.roll_up()  # so the dashboards have numbers without a worker running
        backfill_history(tenant, combinations, until=started)
        audit(
            tenant=tenant,
            actor="demo-agent",
            action=DEMO_COMPLETED,
            target=("tenant", tenant.slug),
            source=AuditEvent.Source.CLI,
        )
        self.stdout.write(
            f"Demo runs done for tenant {tenant.slug!r}: "
            + ", ".join(
                f"{s} {v['objects']} objects (max {v['max_per_key']} per key)"
                for s, v in stats.items()
            )
        )

    def _drive(
        self,
        plaintext: str,
        combinations: dict[str, VersionCombination],
        *,
        runs: int,
        sandbox_url: str,
    ) -> dict[str, Any]:
        """The scripted runs under each combination; the sandbox's counts per service."""
        with (
            _serving(sandbox_url) as (url, sandbox),
            LedgerClient(url, plaintext, agent_id="demo-agent", request_timeout=10) as client,
        ):
            demo = Demo(client, sandbox, self.stdout.write)
            mirror = Demo(client, sandbox, self.stdout.write, mirroring=True)
            for label in ("baseline", "candidate"):
                worse = label == "candidate"
                for index in range(runs):
                    run = client.start_run(
                        user_id=f"customer-{index}", combination_id=combinations[label].pk
                    )
                    demo.script(run, index, worse=worse)
                    run.finish("completed")
                    if not worse:  # the shadow run the ledger asks for, if any
                        client.mirror(run, partial(mirror.script, index=index, worse=False))
            return {
                s: httpx.get(f"{sandbox}/{s}/stats", timeout=5).json()
                for s in ("orders", "payments", "email")
            }

    def _combinations(self, tenant: Tenant) -> dict[str, VersionCombination]:
        out = {}
        for label, fields in COMBINATIONS.items():
            out[label], _ = combinations.create_combination(
                tenant=tenant, label=label, actor="demo_agent", source="cli", **fields
            )
        if not VersionCombination.objects.filter(tenant=tenant, state="active").exists():
            combinations.activate(
                tenant=tenant, combination_id=out["baseline"].pk, actor="demo_agent", source="cli"
            )
        resting = (VersionCombination.State.NEW, VersionCombination.State.RETIRED)
        if out["next"].state in resting:
            combinations.set_shadow(
                tenant=tenant, combination_id=out["next"].pk, actor="demo_agent", source="cli"
            )
        if out["candidate"].state in resting:
            combinations.set_canary(
                tenant=tenant,
                combination_id=out["candidate"].pk,
                share_bp=1000,
                actor="demo_agent",
                source="cli",
            )
        return out

    def _reject_one(self, tenant: Tenant) -> None:
        """One rejected approval, so the console shows what a rejection looks like, decided
        by an approver of this tenant as the console decides (a write that did not land is
        settled by its rejection)."""
        approver = (
            get_user_model()
            .objects.filter(
                memberships__tenant=tenant, memberships__role=Role.APPROVER, is_active=True
            )
            .order_by("pk")
            .first()
        )
        pending = ApprovalRequest.objects.filter(tenant=tenant, state="pending").order_by("pk")
        first = pending.first()
        if approver is not None and first is not None and pending.count() > 1:
            decide_approval(
                approval=first,
                user=approver,
                approve=False,
                reason="The retry count is owned by the platform team; do not change it.",
            )
