"""Auth, tenant isolation and bad input: a clear 4xx, and nothing recorded or changed."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.test import Client
from django.utils import timezone

from ledger.models import ApiToken, AuditEvent, IdempotencyRecord, LedgerEntry, Membership, Tool
from tests.api.conftest import ApiClient

pytestmark = pytest.mark.django_db


def _counts() -> tuple[int, int, int, int]:
    return (
        LedgerEntry.objects.count(),
        IdempotencyRecord.objects.count(),
        Tool.objects.count(),
        AuditEvent.objects.count(),
    )


def _problem(response, status: int, code: str | None = None) -> dict:
    assert response.status_code == status, response.content
    assert response["Content-Type"] == "application/problem+json"
    body = response.json()
    assert body["status"] == status and body["detail"]
    if code:
        assert body["code"] == code
    return body


@pytest.mark.parametrize(
    "header", [None, "Bearer", "Bearer al_wrong", "Basic dXNlcjpwdw==", "Bearer " + "x" * 500]
)
def test_missing_or_wrong_token_is_401(header: str | None) -> None:
    headers = {"Authorization": header} if header else {}
    response = Client().post(
        "/api/v1/calls", data="{}", content_type="application/json", headers=headers, secure=True
    )
    body = _problem(response, 401, "UNAUTHENTICATED")
    assert response["WWW-Authenticate"].startswith("Bearer")
    assert body["type"].startswith("https://")


def test_revoked_token_is_401_and_changes_nothing(api: ApiClient) -> None:
    api.start_run()
    ApiToken.objects.update(revoked_at=timezone.now())
    before = _counts()
    _problem(api.call("create_order", {"x": 1}, business_object_id="o"), 401)
    assert _counts() == before


def test_token_of_a_deactivated_owner_is_401_and_changes_nothing(api: ApiClient) -> None:
    api.start_run()
    owner = ApiToken.objects.get().user
    owner.is_active = False
    owner.save(update_fields=["is_active"])
    before = _counts()
    _problem(api.call("create_order", {"x": 1}, business_object_id="o"), 401)
    assert _counts() == before
    owner.is_active = True
    owner.save(update_fields=["is_active"])
    assert api.call("create_order", {"x": 1}, business_object_id="o").status_code == 200


def test_another_tenants_calls_and_keys_are_not_found(api: ApiClient, other_api: ApiClient) -> None:
    api.start_run()
    mine = api.call("create_order", {"cart": "c"}, business_object_id="cart-1").json()
    before = _counts()
    call_id = mine["call_id"]
    _problem(other_api.get(f"/calls/{call_id}"), 404, "NOT_FOUND")
    _problem(
        other_api.post(
            f"/calls/{call_id}/complete", {"fencing_token": 1, "outcome": "succeeded", "result": {}}
        ),
        404,
    )
    _problem(other_api.post(f"/calls/{call_id}/heartbeat", {"fencing_token": 1}), 404)
    _problem(other_api.post(f"/calls/{call_id}/replay", {"input": {"cart": "c"}}), 404)
    _problem(other_api.post(f"/calls/{call_id}/start", {"input": {"cart": "c"}}), 404)
    _problem(other_api.get("/records", key=mine["idempotency_key"]), 404)
    _problem(other_api.get("/runs/run-1"), 404)
    # Tenant B calling into tenant A's run id finds no such run in its own tenant.
    _problem(other_api.call("create_order", {"cart": "c"}, business_object_id="cart-1"), 404)
    assert _counts() == before
    assert IdempotencyRecord.objects.get().state == "executing"


@pytest.mark.parametrize(
    ("raw", "code"),
    [
        ("{not json", "INVALID_JSON"),
        ("[]", "INVALID_INPUT"),
        ('{"run_id": 5, "step_id": "s", "tool": "read_file"}', "INVALID_INPUT"),
        ('{"run_id": "run-1", "step_id": "s", "tool": "read_file", "input": "x"}', "INVALID_INPUT"),
        (
            '{"run_id": "run-1", "step_id": "s", "tool": "read_file", "surprise": 1}',
            "INVALID_INPUT",
        ),
        (
            '{"run_id": "run-1", "step_id": "s", "tool": "<script>alert(1)</script>"}',
            "INVALID_INPUT",
        ),
        ('{"run_id": "run-1", "step_id": "s\\u0000x", "tool": "read_file"}', "INVALID_JSON"),
        (
            '{"run_id": "run-1", "step_id": "s", "tool": "read_file", "input": {"x": NaN}}',
            "INVALID_JSON",
        ),
    ],
)
def test_bad_call_input_is_400_and_records_nothing(api: ApiClient, raw: str, code: str) -> None:
    api.start_run()
    before = _counts()
    _problem(api.post("/calls", raw=raw), 400, code)
    assert _counts() == before


def test_unknown_tool_is_404_and_records_nothing(api: ApiClient) -> None:
    api.start_run()
    before = _counts()
    body = _problem(api.call("launch_rockets", {}), 404, "NOT_FOUND")
    assert "register it first" in body["detail"]
    assert _counts() == before


def test_oversized_body_is_413_and_records_nothing(api: ApiClient, settings) -> None:
    api.start_run()
    before = _counts()
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 1000
    _problem(api.call("read_file", {"blob": "x" * 5000}), 413, "BODY_TOO_LARGE")
    assert _counts() == before


def test_calls_into_a_missing_run_are_404(api: ApiClient) -> None:
    _problem(api.call("read_file", {"path": "a"}), 404)


def test_registering_a_tool_with_html_in_its_name_is_refused(api: ApiClient) -> None:
    _problem(api.post("/tools", {"name": "<b>x</b>"}), 400, "INVALID_INPUT")
    assert not Tool.objects.exists()


def test_openapi_document_lists_problem_responses(api: ApiClient) -> None:
    document = Client().get("/api/v1/openapi.json", secure=True).json()
    calls = document["paths"]["/api/v1/calls"]["post"]["responses"]
    assert {"200", "400", "401", "404", "409", "422"} <= set(calls)
    assert "application/problem+json" in calls["400"]["content"]
    assert (
        "application/json" in calls["409"]["content"]
        or "application/problem+json" in calls["409"]["content"]
    )
    assert Client().get("/api/v1/docs", secure=True).status_code == 200


def test_invalid_json_says_what_is_wrong(api: ApiClient) -> None:
    api.start_run()
    body = _problem(api.post("/calls", raw='{"run_id": "run-1", "input": {"x": NaN}}'), 400)
    assert "NaN is not valid JSON" in body["detail"]


@pytest.mark.parametrize("agent", ["a" * 101, "bad agent", "<script>"])
def test_a_bad_agent_id_is_a_clear_400(api: ApiClient, agent: str) -> None:
    api.start_run()
    before = LedgerEntry.objects.count()
    response = api.client.post(
        "/api/v1/calls",
        data={"run_id": "run-1", "step_id": "s", "tool": "read_file"},
        content_type="application/json",
        secure=True,
        headers={"Authorization": f"Bearer {api.token}", "X-Agent-Id": agent},
    )
    assert response.status_code == 400 and "X-Agent-Id" in response.json()["detail"]
    assert LedgerEntry.objects.count() == before


def _members_token(tenant, role: str = "") -> tuple[ApiClient, Membership]:
    user = get_user_model().objects.create_user("member", password=None)
    membership = Membership.objects.create(user=user, tenant=tenant, role=role)
    _token, plaintext = ApiToken.issue(tenant=tenant, name="laptop", user=user)
    return ApiClient(tenant, plaintext), membership


def test_a_removed_members_token_is_401_at_their_next_request(tenant) -> None:
    member, membership = _members_token(tenant, "operator")
    member.start_run()
    membership.delete()
    before = _counts()
    _problem(member.call("create_order", {"x": 1}, business_object_id="o"), 401)
    _problem(member.get("/runs/run-1"), 401)
    assert _counts() == before


def test_a_token_acts_only_in_a_tenant_its_owner_belongs_to(tenant, other_tenant) -> None:
    member, membership = _members_token(tenant)
    Membership.objects.filter(pk=membership.pk).update(tenant=other_tenant)
    _problem(member.post("/runs", {"run_id": "r", "user_id": "u"}), 401)
