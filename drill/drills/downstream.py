"""A downstream built on agent_ledger_downstream: the sandbox billing service (FastAPI +
SQLAlchemy, its own process and database) killed by its fault hook right after its commit and
right before it. The ledger's workers settle the unknown calls through the library's look-up
alone (one adapter URL), and retries never make a second invoice."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx

from agent_ledger_client import CallContext
from drill.context import DrillContext, Execute
from drill.drills import Drill
from drill.report import DrillResult
from sandbox.process import ServiceProcess, drop_database, fresh_database, invoices_service

GROUP = "downstream-library"
TOOL = "create_invoice"
RETRIES = 10


@contextmanager
def _billing(ctx: DrillContext) -> Iterator[ServiceProcess]:
    """The billing service on a fresh database, registered in the ledger by one adapter URL."""
    from ledger.models import Tenant, Tool
    from reconcile.models import DownstreamAdapter

    name = f"{ctx.stack.database}_invoices"
    url = fresh_database(ctx.stack.pg_url, name)
    token = secrets.token_urlsafe(16)
    service = invoices_service(url, token=token, log=ctx.stack.logs / "invoices.log", faults=True)
    try:
        service.ensure_running()
        tenant = Tenant.objects.get(slug=ctx.tenant.slug)
        if not Tool.objects.filter(tenant=tenant, name=TOOL).exists():
            with ctx.client() as client:
                client.register_tool(TOOL, description="Bill a customer.")
        DownstreamAdapter.objects.update_or_create(
            tool=Tool.objects.get(tenant=tenant, name=TOOL),
            defaults={
                "tenant": tenant,
                "url_template": f"{service.url}/idempotency/{{key}}?access_token={token}",
                "found_statuses": [200],
                "not_found_statuses": [404],
                "grace_seconds": 2,
                "timeout_seconds": 5,
            },
        )
        yield service
    finally:
        service.stop()
        drop_database(ctx.stack.pg_url, name)


def _bill(ctx: DrillContext, service: ServiceProcess, label: str, fault: str = "") -> Execute:
    """The tool: one invoice for the call, the ledger's key as its Idempotency-Key and as the
    customer, so the service's count per customer is its invoices per key."""

    def execute(call: CallContext) -> Any:
        ctx.count(label)
        response = httpx.post(
            f"{service.url}/invoices",
            json={"customer": call.idempotency_key, "amount_cents": 4200},
            headers={
                "Idempotency-Key": call.idempotency_key,
                **({"X-Fault": fault} if fault else {}),
            },
            timeout=5,
        )
        response.raise_for_status()
        return response.json()

    return execute


def _invoices(service: ServiceProcess, key: str) -> int:
    response = httpx.get(f"{service.url}/invoices/stats", params={"customer": key}, timeout=5)
    response.raise_for_status()
    return int(response.json()["invoices"])


def _killed(ctx: DrillContext, result: DrillResult, *, fault: str, settles: str) -> None:
    """The call dies with the service; the workers settle it; then ten retries through the
    ledger and ten straight to the service with the same key."""
    label = f"bill_{fault}"
    with _billing(ctx) as service, ctx.client() as client, client.run(user_id=label) as run:
        result.add_run(run.run_id)

        def call(fault: str = "") -> dict[str, Any]:
            return run.call(
                TOOL,
                {"invoice": label},
                business_object_id=label,
                execute=_bill(ctx, service, label, fault),
            )

        first = result.observe("bill", call(fault))
        key = first["metadata"]["idempotency_key"]
        result.facts["service_exit_code"] = service.wait_exited()
        service.ensure_running()  # what its supervisor does
        record = ctx.wait_records(client, [key], timeout=60)[key]
        result.facts["invoices_after_settling"] = _invoices(service, key)
        retries = [result.observe("retry", call()) for _ in range(RETRIES)]
        direct = [
            httpx.post(
                f"{service.url}/invoices",
                json={"customer": key, "amount_cents": 4200},
                headers={"Idempotency-Key": key},
                timeout=5,
            )
            for _ in range(RETRIES)
        ]
        invoices = _invoices(service, key)
        result.side_effects[key] = {
            "invoices": {"objects": invoices, "create_requests": ctx.ran(label) + len(direct)}
        }
    result.facts["ledger_retries"] = sorted({f"{o['ok']} {o.get('code')}" for o in retries})
    replayed = [r.headers.get("Idempotent-Replayed") == "true" for r in direct]
    result.facts["direct_retries_replayed"] = sum(replayed)
    result.check("the call was uncertain", first["code"] == "SIDE_EFFECT_UNCERTAIN", first)
    result.check(f"the look-up settled it {settles}", record and record["state"] == settles, record)
    result.check(
        "the ledger answered every retry from the record",
        all(o["metadata"].get("replayed") for o in retries),
        retries,
    )
    result.check("the tool ran once", ctx.ran(label) == 1, ctx.ran(label))
    result.check("every direct retry answered 201", all(r.status_code == 201 for r in direct))
    expected = [True] * RETRIES if settles == "succeeded" else [False] + [True] * (RETRIES - 1)
    result.check("the service ran the key at most once", replayed == expected, replayed)
    result.check("one invoice for the key", invoices == 1, invoices)


def killed_after_commit(ctx: DrillContext, result: DrillResult) -> None:
    """The invoice and its stored response commit; the process dies before answering. The
    look-up finds the key: succeeded, and the retries are replays."""
    _killed(ctx, result, fault="exit-after-commit", settles="succeeded")
    result.check(
        "the invoice existed before any retry", result.facts["invoices_after_settling"] == 1
    )


def killed_before_commit(ctx: DrillContext, result: DrillResult) -> None:
    """The process dies with the invoice written but not committed. The look-up says not found
    (no transaction holds the key): failed_final, and the first retry with the key bills."""
    _killed(ctx, result, fault="exit-before-commit", settles="failed_final")
    result.check(
        "nothing was billed before the retry", result.facts["invoices_after_settling"] == 0
    )


DRILLS = [
    Drill(
        "downstream_killed_after_commit",
        GROUP,
        "a service on agent_ledger_downstream dies after its commit: found, succeeded",
        killed_after_commit,
    ),
    Drill(
        "downstream_killed_before_commit",
        GROUP,
        "a service on agent_ledger_downstream dies before its commit: not found, failed_final",
        killed_before_commit,
    ),
]
