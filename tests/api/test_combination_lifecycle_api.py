"""The lifecycle endpoints next to halt: resume (back to what the halt stopped), retire (with a
reason, audited as a retirement), out of shadow (back to where it came from); the rollback's
report says what it queued for look-up and what needs a human, in structured steps."""

from __future__ import annotations

import threading

import pytest
from django.db import connections
from django.test import Client

from ledger.models import AuditEvent, IdempotencyRecord, Tenant, VersionCombination
from reconcile.models import DownstreamAdapter
from tests.api.conftest import ApiClient, client_for

VERSIONS = {"model": "m1", "prompt": "p1", "rules": "r1", "tool_schema": "t1", "data_version": "d1"}


def _combo(api: ApiClient, label: str) -> dict:
    response = api.post("/combinations", {"label": label, **{**VERSIONS, "model": label}})
    assert response.status_code == 201, response.content
    return response.json()


def _baseline_and_canary(api: ApiClient, share_bp: int = 1000) -> tuple[dict, dict]:
    baseline, canary = _combo(api, "baseline"), _combo(api, "candidate")
    assert baseline["state"] == "new"
    api.post(f"/combinations/{baseline['id']}/activate")
    response = api.post(f"/combinations/{canary['id']}/canary", {"share_bp": share_bp})
    assert response.json()["state"] == "canary"
    return baseline, canary


@pytest.mark.django_db
def test_a_halted_canary_resumes_as_the_canary_it_was(api: ApiClient) -> None:
    baseline, canary = _baseline_and_canary(api)
    halted = api.post(f"/combinations/{canary['id']}/halt", {"reason": "spike"}).json()
    assert (halted["state"], halted["canary_share_bp"]) == ("halted", 0)
    resumed = api.post(f"/combinations/{canary['id']}/resume", {"reason": "load test"})
    assert resumed.status_code == 200
    assert (resumed.json()["state"], resumed.json()["canary_share_bp"]) == ("canary", 1000)
    assert api.get(f"/combinations/{baseline['id']}").json()["state"] == "active"
    again = api.post(f"/combinations/{canary['id']}/resume", {"reason": "twice"})
    assert again.status_code == 409 and again.json()["code"] == "INVALID_TRANSITION"
    event = AuditEvent.objects.get(action="combination.resumed")
    assert (event.detail, event.source) == ("load test", "api")


@pytest.mark.django_db
@pytest.mark.parametrize("change", ["resume", "retire", "unshadow", "halt"])
def test_a_change_needs_a_reason(api: ApiClient, change: str) -> None:
    _baseline, canary = _baseline_and_canary(api)
    for body in ({}, {"reason": ""}, {"reason": "   "}):
        response = api.post(f"/combinations/{canary['id']}/{change}", body)
        assert response.status_code == 400, (body, response.content)
    assert VersionCombination.objects.get(pk=canary["id"]).state == "canary"


@pytest.mark.django_db
def test_a_canary_is_retired_with_a_reason_and_the_active_one_is_not(api: ApiClient) -> None:
    baseline, canary = _baseline_and_canary(api)
    retired = api.post(f"/combinations/{canary['id']}/retire", {"reason": "it lost"})
    assert retired.status_code == 200 and retired.json()["state"] == "retired"
    event = AuditEvent.objects.get(action="combination.retired", target_id=str(canary["id"]))
    assert (event.detail, event.before["state"]) == ("it lost", "canary")
    refused = api.post(f"/combinations/{baseline['id']}/retire", {"reason": "r"})
    assert refused.status_code == 409 and "activating another" in refused.json()["detail"]
    assert VersionCombination.objects.get(pk=baseline["id"]).state == "active"


@pytest.mark.django_db
def test_a_canary_share_of_zero_is_refused(api: ApiClient) -> None:
    _baseline, canary = _baseline_and_canary(api)
    response = api.post(f"/combinations/{canary['id']}/canary", {"share_bp": 0})
    assert response.status_code == 400
    assert VersionCombination.objects.get(pk=canary["id"]).state == "canary"


@pytest.mark.django_db
def test_out_of_shadow_returns_a_canary_to_its_share(api: ApiClient) -> None:
    _baseline, canary = _baseline_and_canary(api, share_bp=700)
    api.post(f"/combinations/{canary['id']}/shadow", {"share_bp": 5000, "reason": "compare"})
    out = api.post(f"/combinations/{canary['id']}/unshadow", {"reason": "compared"}).json()
    assert (out["state"], out["canary_share_bp"]) == ("canary", 700)
    refused = api.post(f"/combinations/{canary['id']}/unshadow", {"reason": "again"})
    assert refused.status_code == 409


@pytest.mark.django_db
def test_another_tenants_combination_is_not_found_and_unchanged(api: ApiClient) -> None:
    _baseline, canary = _baseline_and_canary(api)
    api.post(f"/combinations/{canary['id']}/halt", {"reason": "r"})
    them = client_for(Tenant.objects.create(slug="globex", name="Globex"))
    for change in ("resume", "retire", "unshadow"):
        response = them.post(f"/combinations/{canary['id']}/{change}", {"reason": "r"})
        assert response.status_code == 404, change
    anonymous = Client().post(
        f"/api/v1/combinations/{canary['id']}/resume",
        {"reason": "r"},
        content_type="application/json",
        secure=True,
    )
    assert anonymous.status_code == 401
    assert VersionCombination.objects.get(pk=canary["id"]).state == "halted"


@pytest.mark.django_db(transaction=True)
def test_two_resumes_at_once_resume_once() -> None:
    tenant = Tenant.objects.create(slug="acme", name="Acme")
    first, second = client_for(tenant), client_for(tenant)
    _baseline, canary = _baseline_and_canary(first)
    first.post(f"/combinations/{canary['id']}/halt", {"reason": "spike"})
    barrier = threading.Barrier(2)
    statuses: list[int] = []

    def resume(api: ApiClient) -> None:
        try:
            barrier.wait(10)
            statuses.append(
                api.post(f"/combinations/{canary['id']}/resume", {"reason": "go"}).status_code
            )
        finally:
            connections.close_all()

    threads = [threading.Thread(target=resume, args=(api,)) for api in (first, second)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert sorted(statuses) == [200, 409]
    assert AuditEvent.objects.filter(action="combination.resumed").count() == 1
    stored = VersionCombination.objects.get(pk=canary["id"])
    assert (stored.state, stored.canary_share_bp) == ("canary", 1000)


def _uncertain_order(api: ApiClient, run_id: str, cart: str, tool: str = "create_order") -> str:
    call = api.post(
        "/calls",
        {
            "run_id": run_id,
            "step_id": f"s-{cart}",
            "tool": tool,
            "input": {"cart": cart},
            "business_object_id": cart,
        },
    ).json()
    api.post(f"/calls/{call['call_id']}/complete", {"fencing_token": 1, "outcome": "uncertain"})
    return call["idempotency_key"]


@pytest.mark.django_db
def test_the_rollback_report_separates_what_it_queues_from_what_needs_a_human(
    tenant, api: ApiClient
) -> None:
    good, bad = _combo(api, "good"), _combo(api, "bad")
    api.post(f"/combinations/{good['id']}/activate")
    api.post(f"/combinations/{bad['id']}/activate")
    api.start_run("run-bad")
    looked_up = _uncertain_order(api, "run-bad", "c1")
    nothing_to_ask = _uncertain_order(api, "run-bad", "c2", tool="send_email")
    create_order = IdempotencyRecord.objects.get(key=looked_up).tool
    DownstreamAdapter.objects.create(
        tenant=tenant, tool=create_order, url_template="http://127.0.0.1:9/orders/{key}"
    )

    dry = api.post(
        f"/combinations/{bad['id']}/rollback", {"reason": "spike", "dry_run": True}
    ).json()
    assert dry["queued_for_lookup"] == [looked_up]
    assert [(i["kind"], i["key"]) for i in dry["needs_human"]] == [("no_lookup", nothing_to_ask)]
    assert "no downstream adapter" in dry["needs_human"][0]["reason"]
    assert (
        dry["needs_human"][0]["record_id"] == IdempotencyRecord.objects.get(key=nothing_to_ask).pk
    )
    assert [s["kind"] for s in dry["steps"]] == [
        "halt",
        "restore",
        "invalidate_approvals",
        "queue_lookups",
        "needs_human",
    ]
    assert dry["steps"][3]["args"] == {"count": 1}

    done = api.post(f"/combinations/{bad['id']}/rollback", {"reason": "spike"}).json()
    assert done["queued_for_lookup"] == [looked_up]
    assert done["steps"][0] == {
        "kind": "halted",
        "args": {"combination": bad["id"], "approvals": 0},
    }
    assert {"kind": "restored", "args": {"combination": good["id"]}} in done["steps"]
    assert {"kind": "lookups_queued", "args": {"count": 1}} in done["steps"]
    again = api.post(f"/combinations/{bad['id']}/rollback", {"reason": "spike"}).json()
    assert again["steps"][0]["kind"] == "already_halted"


@pytest.mark.django_db
@pytest.mark.parametrize("state", ["new", "retired"])
@pytest.mark.parametrize("dry_run", [False, True])
def test_a_combination_that_takes_no_runs_is_not_rolled_back(
    api: ApiClient, state: str, dry_run: bool
) -> None:
    _baseline, canary = _baseline_and_canary(api)
    if state == "retired":
        api.post(f"/combinations/{canary['id']}/retire", {"reason": "it lost"})
    target = canary if state == "retired" else _combo(api, "untried")
    audited = AuditEvent.objects.count()
    response = api.post(
        f"/combinations/{target['id']}/rollback", {"reason": "spike", "dry_run": dry_run}
    )
    assert response.status_code == 409, response.content
    assert response.json()["code"] == "INVALID_TRANSITION"
    assert response.json()["detail"] == (
        f"a {state} combination cannot be rolled back ({target['label']}): only an active, "
        "canary, shadow or halted one can be"
    )
    assert VersionCombination.objects.get(pk=target["id"]).state == state
    assert AuditEvent.objects.count() == audited


@pytest.mark.django_db
def test_the_openapi_document_describes_the_lifecycle_endpoints() -> None:
    document = Client().get("/api/v1/openapi.json", secure=True).json()
    paths = document["paths"]
    for change in ("resume", "retire", "unshadow"):
        operation = paths[f"/api/v1/combinations/{{combination_id}}/{change}"]["post"]
        assert operation["summary"] and {"200", "400", "404", "409"} <= set(operation["responses"])
    schemas = document["components"]["schemas"]
    assert set(schemas["RollbackStepOut"]["properties"]) == {"kind", "args"}
    assert "no_lookup" in str(schemas["NeedsHumanOut"])


@pytest.mark.django_db
def test_a_run_that_exists_is_resumed_after_its_combination_halted(api: ApiClient) -> None:
    """A restarted runtime (an MCP proxy) starting its run again gets the run; its next call
    hears RUN_HALTED as a call's answer, not as a failed start."""
    active = _combo(api, "active")
    api.post(f"/combinations/{active['id']}/activate")
    api.start_run("run-1")
    api.post(f"/combinations/{active['id']}/halt", {"reason": "spike"})
    again = api.post("/runs", {"run_id": "run-1", "user_id": "u1"})
    assert again.status_code == 200, again.content
    refused = api.call("create_order", {"cart": 1})
    assert refused.json()["observation"]["code"] == "RUN_HALTED"
    new = api.post("/runs", {"run_id": "run-2", "user_id": "u1"})
    assert new.status_code == 409 and new.json()["code"] == "RUN_HALTED"
