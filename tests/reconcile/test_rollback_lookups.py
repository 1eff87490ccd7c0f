"""A rollback's report of look-ups is what the workers then do: what it says it queued is
sent to them and looked up; what it says needs a human is not settled by any worker (an
escalated call is skipped, a call with nothing to look it up with is escalated, in the words
the report used)."""

from __future__ import annotations

import httpx
import pytest

from ledger import combinations
from ledger.models import IdempotencyRecord, Tenant, VersionCombination
from ledger.signals import records_became_unknown
from reconcile.models import DownstreamAdapter, ReconcileAttempt
from reconcile.operator_actions import escalate
from reconcile.services import reconcile_record
from sandbox.server import SandboxServer
from tests.api.conftest import ApiClient, client_for
from tests.console.conftest import sha

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("private_downstreams")]


def _uncertain(api: ApiClient, tool: str, cart: str, **extra) -> IdempotencyRecord:
    call = api.post(
        "/calls",
        {
            "run_id": "run-bad",
            "step_id": f"s-{tool}-{cart}",
            "tool": tool,
            "input": {"cart": cart},
            **extra,
        },
    ).json()
    api.post(f"/calls/{call['call_id']}/complete", {"fencing_token": 1, "outcome": "uncertain"})
    return IdempotencyRecord.objects.get(key=call["idempotency_key"])


def _bad_combination(tenant: Tenant, api: ApiClient) -> VersionCombination:
    versions = {"model": "m", "rules": "r", "tool_schema": "t", "data_version": "d"}
    for label in ("good", "bad"):
        combination, _ = combinations.create_combination(
            tenant=tenant, label=label, actor="x", source="api", prompt=label, **versions
        )
        combinations.activate(tenant=tenant, combination_id=combination.pk, actor="x", source="api")
    api.start_run("run-bad")
    return combination


def test_the_report_says_what_the_workers_then_do(tenant, sandbox: SandboxServer) -> None:
    api = client_for(tenant)
    bad = _bad_combination(tenant, api)
    found = _uncertain(api, "create_order", "c1", business_object_id="c1")
    DownstreamAdapter.objects.create(
        tenant=tenant,
        tool=found.tool,
        url_template=f"{sandbox.url}/orders/objects/by-key/{{key}}",
        found_statuses=[200],
        not_found_statuses=[404],
        grace_seconds=0,
    )
    httpx.post(
        f"{sandbox.url}/orders/objects",
        json={"reference": "c1"},
        headers={"Idempotency-Key": found.key},
    )
    escalated = _uncertain(api, "create_order", "c2", business_object_id="c2")
    escalate(record=escalated, actor="op", reason="the shop is down")
    no_adapter = _uncertain(api, "send_email", "c3")
    plan = {
        "workspace": "nowhere",
        "path": "a.py",
        "before_hash": sha("a"),
        "after_hash": sha("b"),
        "diff": "",
    }
    unregistered = _uncertain(api, "write_file", "c4", write_plan=plan)
    sent: list[int] = []

    def heard(sender, record_ids, **kwargs) -> None:
        sent.extend(record_ids)

    records_became_unknown.connect(heard, weak=False)
    try:
        report = combinations.rollback(
            tenant=tenant, combination_id=bad.pk, actor="mgr", source="console", reason="spike"
        )
    finally:
        records_became_unknown.disconnect(heard)

    assert report.queued_for_lookup == [found.key]
    assert sent == [found.pk]  # sent to the workers: exactly what the report says it queued
    needs = {item["record_id"]: item for item in report.needs_human}
    assert {pk: item["kind"] for pk, item in needs.items()} == {
        escalated.pk: "unknown_escalated",
        no_adapter.pk: "no_lookup",
        unregistered.pk: "no_lookup",
    }

    # The worker path, for every unknown call of the bad combination (as the sweep would).
    assert reconcile_record(found.pk) == "succeeded"
    assert reconcile_record(escalated.pk) == "skipped"  # escalated: never looked up
    assert not ReconcileAttempt.objects.filter(record=escalated).exists()
    for record in (no_adapter, unregistered):
        assert reconcile_record(record.pk) == "escalated"
        settled = IdempotencyRecord.objects.get(pk=record.pk)
        assert settled.escalation_reason == needs[record.pk]["reason"]
