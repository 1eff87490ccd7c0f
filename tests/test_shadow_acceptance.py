"""Shadow runs of the demo agent against the sandbox, over HTTP through the client: every
live run is mirrored by a shadow run, and the sandbox sees no side effect from any of them."""

from __future__ import annotations

import time
import uuid
from functools import partial
from typing import Any

import httpx
import pytest
from django.test import override_settings

from agent_ledger_client import LedgerClient, LedgerRequestError
from console.management.commands.demo_agent import COMBINATIONS, Demo, _serving
from ledger import combinations
from ledger.models import (
    ApiToken,
    IdempotencyRecord,
    LedgerEntry,
    Run,
    ServiceAccount,
    Tenant,
    VersionCombination,
)
from sandbox.server import SERVICES

pytestmark = pytest.mark.django_db(transaction=True)


def _side_effects(sandbox_url: str) -> dict[str, Any]:
    """Everything a side effect leaves in the sandbox: create requests and objects per
    service, and file writes in the workspace."""
    counts: dict[str, Any] = {}
    for service in SERVICES:
        stats = httpx.get(f"{sandbox_url}/{service}/stats", timeout=5).json()
        counts[service] = (stats["objects"], sum(stats["create_requests_per_key"].values()))
    counts["workspace"] = httpx.get(f"{sandbox_url}/workspace/stats", timeout=5).json()["writes"]
    return counts


def _combinations(tenant: Tenant) -> dict[str, VersionCombination]:
    made = {
        label: combinations.create_combination(
            tenant=tenant, label=label, actor="test", source="system", **fields
        )[0]
        for label, fields in COMBINATIONS.items()
    }
    combinations.activate(
        tenant=tenant, combination_id=made["baseline"].pk, actor="test", source="system"
    )
    combinations.set_shadow(
        tenant=tenant, combination_id=made["next"].pk, actor="test", source="system"
    )
    return made


def _mirror(runs: int) -> dict[str, Any]:
    """``runs`` live runs of the demo agent, each mirrored by a shadow run; the sandbox's side
    effects caused while the shadow runs ran, and what a client forcing one got."""
    tenant = Tenant.objects.create(slug="demo", name="Demo Co")
    made = _combinations(tenant)
    runtime = ServiceAccount.named(tenant=tenant, name="demo-agent").user
    _token, plaintext = ApiToken.issue(tenant=tenant, name="demo-agent", user=runtime)
    from_shadows = 0
    forced: list[int] = []
    executed: list[Any] = []
    with (
        override_settings(DEBUG=True),
        _serving("") as (url, sandbox),
        LedgerClient(url, plaintext, agent_id="demo-agent", request_timeout=10) as client,
    ):
        live_demo = Demo(client, sandbox, lambda _text: None)
        shadow_demo = Demo(client, sandbox, lambda _text: None, mirroring=True)
        for index in range(runs):
            live = client.start_run(
                user_id=f"customer-{index}",
                run_id=f"live-{uuid.uuid4().hex[:12]}",
                combination_id=made["baseline"].pk,
            )
            live_demo.script(live, index, worse=False)
            live.finish("completed")
            before = _side_effects(sandbox)
            shadow = client.mirror(live, partial(shadow_demo.script, index=index, worse=False))
            after = _side_effects(sandbox)
            assert shadow is not None  # the whole share: every live run is mirrored
            from_shadows += sum(
                (a[0] - b[0]) + (a[1] - b[1]) if isinstance(a, tuple) else a - b
                for a, b in zip(after.values(), before.values(), strict=True)
            )
            dry = LedgerEntry.objects.filter(
                run__run_id=shadow.run_id, decision="shadow_dry_run"
            ).first()
            assert dry is not None
            with pytest.raises(LedgerRequestError) as replayed:
                client.replay(str(dry.call_id), dry.input, execute=executed.append)
            with pytest.raises(LedgerRequestError) as started:
                client.drive(
                    client.protocol.request(
                        "POST", f"/calls/{dry.call_id}/start", json={"input": dry.input}
                    )
                )
            forced += [replayed.value.status, started.value.status]
        live_total = _side_effects(sandbox)
    assert executed == []  # the client was never told to execute the forced call
    return {"from_shadows": from_shadows, "forced": forced, "live_total": live_total, "made": made}


def _assert_mirrored(outcome: dict[str, Any], runs: int) -> None:
    assert outcome["from_shadows"] == 0
    assert outcome["forced"] == [409] * (2 * runs)
    assert outcome["live_total"]["orders"][0] >= runs  # the live runs did cause side effects
    shadows = Run.objects.filter(shadow_of__isnull=False)
    assert shadows.count() == runs
    assert set(shadows.values_list("combination", flat=True)) == {outcome["made"]["next"].pk}
    assert (
        not IdempotencyRecord.objects.filter(shadow=True)
        .exclude(classified_as="idempotent")
        .exists()
    )
    dry_runs = LedgerEntry.objects.filter(run__in=shadows, decision="shadow_dry_run")
    assert dry_runs.count() >= 3 * runs  # order, its retry, mail, config at least
    assert (
        not LedgerEntry.objects.filter(run__in=shadows, decision="execute")
        .exclude(idempotency="idempotent")
        .exists()
    )


def test_shadow_runs_of_the_demo_agent_cause_no_side_effect() -> None:
    _assert_mirrored(_mirror(3), 3)


@pytest.mark.scale
def test_a_hundred_shadow_runs_cause_no_side_effect() -> None:
    started = time.monotonic()
    _assert_mirrored(_mirror(100), 100)
    print(f"100 live + 100 shadow demo runs: {time.monotonic() - started:.1f} s")
