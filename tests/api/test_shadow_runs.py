"""Shadow runs through the HTTP API: reads run, side effects are answered SHADOW_DRY_RUN, and
no path (call, retry, replay, start, approval) ever hands a shadow run a side-effecting
execution."""

from __future__ import annotations

import hashlib
from typing import Any

import pytest
from django.db import IntegrityError, transaction

from ledger import combinations, records
from ledger.domain import DataClassification, ReplayPolicy
from ledger.keys import fingerprint
from ledger.models import (
    ApprovalRequest,
    AuditEvent,
    IdempotencyRecord,
    LedgerEntry,
    Run,
    Tenant,
    VersionCombination,
    WritePlan,
)
from tests.api.conftest import ApiClient

pytestmark = pytest.mark.django_db


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def _combination(tenant: Tenant, label: str) -> VersionCombination:
    combination, _ = combinations.create_combination(
        tenant=tenant,
        label=label,
        actor="test",
        source="system",
        model=f"model-{label}",
        prompt="p",
        rules="r",
        tool_schema="t",
        data_version="d",
    )
    return combination


@pytest.fixture
def candidate(tenant: Tenant) -> VersionCombination:
    baseline = _combination(tenant, "baseline")
    combinations.activate(tenant=tenant, combination_id=baseline.pk, actor="test", source="system")
    shadowed = _combination(tenant, "candidate")
    return combinations.set_shadow(
        tenant=tenant, combination_id=shadowed.pk, actor="test", source="system"
    )


def _start_shadow(api: ApiClient, run_id: str = "shadow-1", live: str = "run-1") -> Any:
    return api.post(
        "/runs", {"run_id": run_id, "user_id": "u1", "shadow": True, "mirrors_run_id": live}
    )


def _shadow_call(api: ApiClient, tool: str, tool_input: dict[str, Any], **extra: Any) -> Any:
    body = {"run_id": "shadow-1", "step_id": "step-1", "tool": tool, "input": tool_input, **extra}
    return api.post("/calls", body)


@pytest.fixture
def shadow_run(api: ApiClient, candidate: VersionCombination) -> dict[str, Any]:
    api.start_run()
    response = _start_shadow(api)
    assert response.status_code == 201, response.content
    return response.json()


def test_a_shadow_run_mirrors_a_live_run_under_the_combination_in_shadow(
    shadow_run: dict[str, Any], candidate: VersionCombination
) -> None:
    assert shadow_run["shadow_of"] == "run-1"
    assert shadow_run["combination_id"] == candidate.pk
    run = Run.objects.get(run_id="shadow-1")
    assert run.shadow_of is not None and run.shadow_of.run_id == "run-1"
    started = AuditEvent.objects.get(action="run.started", target_id=str(run.pk))
    assert started.after["shadow_of"] == "run-1"


def test_starting_the_same_shadow_run_again_returns_it(
    api: ApiClient, shadow_run: dict[str, Any]
) -> None:
    again = _start_shadow(api)
    assert again.status_code == 200 and again.json()["shadow_of"] == "run-1"


def test_a_run_id_taken_by_a_live_run_cannot_become_a_shadow(
    api: ApiClient, shadow_run: dict[str, Any]
) -> None:
    api.start_run("run-2")
    response = _start_shadow(api, run_id="run-2")
    assert response.status_code == 409
    assert Run.objects.get(run_id="run-2").shadow_of_id is None


@pytest.mark.parametrize(
    ("body", "status"),
    [
        ({"shadow": True}, 400),
        ({"mirrors_run_id": "run-1"}, 400),
        ({"shadow": True, "mirrors_run_id": "no-such-run"}, 404),
        ({"shadow": True, "mirrors_run_id": "shadow-1"}, 400),  # a shadow of a shadow
    ],
)
def test_a_malformed_shadow_start_is_refused_and_starts_nothing(
    api: ApiClient, shadow_run: dict[str, Any], body: dict[str, Any], status: int
) -> None:
    response = api.post("/runs", {"run_id": "shadow-2", "user_id": "u1", **body})
    assert response.status_code == status, response.content
    assert not Run.objects.filter(run_id="shadow-2").exists()


def test_a_shadow_run_needs_a_combination_in_shadow(api: ApiClient, tenant: Tenant) -> None:
    api.start_run()
    response = _start_shadow(api)
    assert response.status_code == 409
    assert "shadow" in response.json()["detail"]


def test_a_combination_in_shadow_takes_no_live_run(
    api: ApiClient, candidate: VersionCombination
) -> None:
    response = api.post(
        "/runs", {"run_id": "live-2", "user_id": "u1", "combination_id": candidate.pk}
    )
    assert response.status_code == 409
    assert not Run.objects.filter(run_id="live-2").exists()


def test_reads_in_a_shadow_run_execute_as_usual(api: ApiClient, shadow_run: dict[str, Any]) -> None:
    response = _shadow_call(api, "read_file", {"path": "README.md"})
    body = response.json()
    assert body["decision"] == "execute" and body["lease"]["fencing_token"] == 1
    record = IdempotencyRecord.objects.get()
    assert record.shadow and record.classified_as == "idempotent"
    listing = _shadow_call(api, "run_command", {"command": "ls -la"}, step_id="step-2").json()
    assert listing["decision"] == "execute"


@pytest.mark.parametrize(
    ("tool", "tool_input"),
    [
        ("create_order", {"cart": "c-1"}),
        ("send_email", {"to": "a@example.com"}),
        ("run_command", {"command": "npm publish"}),
        ("run_command", {"command": "ls; rm -rf /"}),
        ("update_config", {"path": "app.yaml", "content": "x"}),
        ("charge_customer", {"amount": 5}),
    ],
)
def test_side_effecting_calls_in_a_shadow_run_are_dry_runs(
    api: ApiClient, shadow_run: dict[str, Any], tool: str, tool_input: dict[str, Any]
) -> None:
    response = _shadow_call(api, tool, tool_input, business_object_id="obj-1")
    assert response.status_code == 200
    body = response.json()
    assert body["decision"] == "shadow_dry_run" and body["lease"] is None
    assert body["observation"]["ok"] is False
    assert body["observation"]["code"] == "SHADOW_DRY_RUN"
    assert body["observation"]["metadata"]["next_action"] == "continue"
    assert body["record_state"] is None
    assert not IdempotencyRecord.objects.exists()
    entry = LedgerEntry.objects.get(call_id=body["call_id"])
    assert entry.decision == "shadow_dry_run" and entry.status == "planned"
    assert entry.record is None and entry.input_hash == fingerprint(tool_input)
    assert entry.idempotency != "idempotent"


def test_a_dry_run_records_the_write_plan_and_its_diff(
    api: ApiClient, shadow_run: dict[str, Any]
) -> None:
    plan = {
        "workspace": "demo",
        "path": "config/app.yaml",
        "before_hash": _sha("a\n"),
        "after_hash": _sha("b\n"),
        "diff": "--- a/config/app.yaml\n+++ b/config/app.yaml\n@@ -1 +1 @@\n-a\n+b\n",
    }
    body = _shadow_call(
        api, "update_config", {"path": "config/app.yaml", "content": "b\n"}, write_plan=plan
    ).json()
    assert body["decision"] == "shadow_dry_run"
    saved = WritePlan.objects.get(entry__call_id=body["call_id"])
    assert saved.diff == plan["diff"] and saved.after_hash == plan["after_hash"]


def test_retrying_a_dry_run_never_executes(api: ApiClient, shadow_run: dict[str, Any]) -> None:
    for _ in range(3):
        body = _shadow_call(api, "create_order", {"cart": "c-1"}, business_object_id="c").json()
        assert body["decision"] == "shadow_dry_run"
    assert not IdempotencyRecord.objects.exists()
    assert LedgerEntry.objects.filter(decision="shadow_dry_run").count() == 3


@pytest.mark.parametrize("follow_up", ["replay", "start"])
def test_a_dry_run_cannot_be_replayed_or_started(
    api: ApiClient, shadow_run: dict[str, Any], follow_up: str
) -> None:
    body = _shadow_call(api, "create_order", {"cart": "c-1"}, business_object_id="c").json()
    response = api.post(f"/calls/{body['call_id']}/{follow_up}", {})
    assert response.status_code == 409
    assert response.json()["code"] == "SHADOW_DRY_RUN"
    assert not IdempotencyRecord.objects.exists()
    assert LedgerEntry.objects.count() == 1


def test_a_client_declaring_a_side_effect_idempotent_for_a_shadow_run_is_a_tenant_wide_rule(
    api: ApiClient, shadow_run: dict[str, Any]
) -> None:
    """The client cannot make a side effect look like a read for its shadow run only: a
    declaration changes the tool for every run, and the classifier keeps a write verb's class
    whatever is declared."""
    declared = api.post("/tools", {"name": "send_email", "idempotency": "idempotent"})
    assert declared.status_code == 200, declared.content
    body = _shadow_call(api, "send_email", {"to": "a@example.com"}, business_object_id="m").json()
    assert body["decision"] == "shadow_dry_run"
    assert not IdempotencyRecord.objects.exists()


def test_a_shadow_runs_keys_are_its_own(api: ApiClient, shadow_run: dict[str, Any]) -> None:
    """A business-scoped read in the shadow run never answers from the live run's record."""
    live = api.call("get_order_status", {"order": "o-1"}, business_object_id="o-1").json()
    shadow = _shadow_call(api, "get_order_status", {"order": "o-1"}, business_object_id="o-1")
    body = shadow.json()
    assert body["decision"] == "execute"
    assert body["idempotency_key"] != live["idempotency_key"]
    assert "shadow-1" in body["idempotency_key"]
    assert IdempotencyRecord.objects.filter(shadow=True).count() == 1


def test_the_database_refuses_a_shadow_runs_side_effecting_record(
    shadow_run: dict[str, Any], tenant: Tenant, create_order: Any
) -> None:
    """The last line: whatever code path asks, PostgreSQL refuses to reserve (let alone start
    or ask an approval for) a side-effecting action of a shadow run."""
    run = Run.objects.get(run_id="shadow-1")
    for policy, approval in ((ReplayPolicy.NEVER, False), (ReplayPolicy.ASK, True)):
        with (
            pytest.raises(IntegrityError, match="record_shadow_only_reads"),
            transaction.atomic(),
        ):
            records.reserve_key(
                tenant=tenant,
                tool=create_order,
                key=f"agent:acme:u1:shadow-1:create_order:{policy}",
                fingerprint=fingerprint({}),
                replay_policy=policy,
                data_classification=DataClassification.INTERNAL,
                lease_owner="test",
                actor="test",
                run=run,
                requires_approval=approval,
            )
    assert not IdempotencyRecord.objects.exists()
    assert not ApprovalRequest.objects.exists()
