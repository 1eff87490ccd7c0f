"""Hostile and malformed requests get the 4xx named for them, as problem+json, change nothing
and leave no traceback in the log."""

from __future__ import annotations

import json
import logging

import pytest
from django.test import Client

from ledger.models import AuditEvent, IdempotencyRecord, LedgerEntry
from tests.api.conftest import ApiClient

pytestmark = pytest.mark.django_db

PLAN = {
    "workspace": "repo",
    "before_hash": "a" * 64,
    "after_hash": "b" * 64,
    "diff": "-old\n+new\n",
}


def _counts() -> tuple[int, int, int]:
    return (
        IdempotencyRecord.objects.count(),
        LedgerEntry.objects.count(),
        AuditEvent.objects.count(),
    )


def _problem(response, status: int, code: str) -> None:
    assert response.status_code == status, response.content
    assert response["Content-Type"] == "application/problem+json"
    assert response.json()["code"] == code


@pytest.fixture
def quiet_tracebacks(caplog: pytest.LogCaptureFixture):
    with caplog.at_level(logging.INFO):
        yield
    assert not [r for r in caplog.records if r.exc_info or r.levelno >= logging.ERROR]


@pytest.mark.parametrize(
    "path",
    [
        "/runs/a%00b",
        "/records?key=a%00b",
        "/tools?tool=a%00b",
        "/records?key=%ff%fe",
        "/calls/0000%0A",
    ],
)
def test_nul_control_characters_and_invalid_utf8_in_paths_and_queries_are_400(
    api: ApiClient, path: str, quiet_tracebacks
) -> None:
    before = _counts()
    response = api.client.get(f"/api/v1{path}", headers=api._headers(), secure=True)
    _problem(response, 400, "INVALID_INPUT")
    assert _counts() == before


def test_a_nul_in_a_header_is_400(api: ApiClient, quiet_tracebacks) -> None:
    response = api.client.get(
        "/api/v1/tools", headers={**api._headers(), "X-Agent": "a\x00b"}, secure=True
    )
    _problem(response, 400, "INVALID_INPUT")


@pytest.mark.parametrize(
    "path",
    [
        "../../etc/passwd",
        "/etc/passwd",
        "a/../../../etc/shadow",
        "..\\..\\windows\\win.ini",
        "C:/Windows/win.ini",
        "a//b",
        "./a",
        "a/./b",
        "a\x01b",
    ],
)
def test_write_plan_paths_outside_the_workspace_are_422(
    api: ApiClient, path: str, quiet_tracebacks
) -> None:
    api.start_run()
    before = _counts()
    response = api.call("write_file", {"path": "x"}, write_plan={**PLAN, "path": path})
    _problem(response, 422, "INVALID_WRITE_PLAN")
    assert _counts() == before


def test_a_normal_relative_path_is_accepted(api: ApiClient) -> None:
    api.start_run()
    response = api.call(
        "write_file", {"path": "src/app.py"}, write_plan={**PLAN, "path": "src/app.py"}
    )
    assert response.status_code == 200, response.content


@pytest.mark.parametrize(
    "content_type", ["text/plain", "application/x-www-form-urlencoded", "application/xml"]
)
def test_bodies_that_are_not_json_are_415(
    api: ApiClient, content_type: str, quiet_tracebacks
) -> None:
    before = _counts()
    response = api.client.post(
        "/api/v1/runs",
        data=json.dumps({"run_id": "r", "user_id": "u"}),
        content_type=content_type,
        headers=api._headers(),
        secure=True,
    )
    _problem(response, 415, "UNSUPPORTED_MEDIA_TYPE")
    assert _counts() == before


def test_a_chunked_body_without_a_length_is_411_not_read_as_empty(
    api: ApiClient, quiet_tracebacks
) -> None:
    response = api.client.generic(
        "POST",
        "/api/v1/runs",
        data=b"",
        content_type="application/json",
        headers={**api._headers(), "Transfer-Encoding": "chunked"},
        secure=True,
    )
    _problem(response, 411, "LENGTH_REQUIRED")


def test_duplicate_keys_in_a_body_are_400(api: ApiClient, quiet_tracebacks) -> None:
    before = _counts()
    response = api.post("/runs", raw='{"run_id": "r1", "run_id": "r2", "user_id": "u"}')
    _problem(response, 400, "INVALID_JSON")
    assert "run_id" in response.json()["detail"]
    assert _counts() == before


def test_nesting_and_string_length_are_bounded(api: ApiClient, settings, quiet_tracebacks) -> None:
    settings.LEDGER_MAX_JSON_DEPTH = 8
    settings.LEDGER_MAX_STRING_CHARS = 100
    api.start_run()
    deep: object = "x"
    for _ in range(10):
        deep = [deep]
    _problem(api.call("read_file", {"deep": deep}), 422, "INPUT_TOO_LARGE")
    _problem(api.call("read_file", {"text": "y" * 101}), 422, "INPUT_TOO_LARGE")
    assert api.call("read_file", {"text": "y" * 100}).status_code == 200


@pytest.mark.parametrize("method", ["put", "delete", "patch"])
def test_wrong_methods_are_405_problem_json(api: ApiClient, method: str, quiet_tracebacks) -> None:
    response = getattr(api.client, method)("/api/v1/runs", headers=api._headers(), secure=True)
    _problem(response, 405, "METHOD_NOT_ALLOWED")
    assert "POST" in response["Allow"]


def test_unknown_api_paths_are_404_problem_json(api: ApiClient, quiet_tracebacks) -> None:
    _problem(api.client.get("/api/v1/nothing-here", secure=True), 404, "NOT_FOUND")


def test_a_second_report_with_a_different_result_is_409_with_the_recorded_one(
    api: ApiClient,
) -> None:
    api.start_run()
    call = api.call("create_order", {"cart": "c-1"}, business_object_id="cart-1").json()
    report = {"fencing_token": call["lease"]["fencing_token"], "outcome": "succeeded"}
    first = api.post(f"/calls/{call['call_id']}/complete", {**report, "result": {"id": "o-1"}})
    assert first.status_code == 200
    assert (
        api.post(
            f"/calls/{call['call_id']}/complete", {**report, "result": {"id": "o-1"}}
        ).status_code
        == 200
    )
    other = api.post(f"/calls/{call['call_id']}/complete", {**report, "result": {"id": "o-2"}})
    _problem(other, 409, "RESULT_CONFLICT")
    body = other.json()
    assert body["record_state"] == "succeeded"
    assert body["observation"]["ok"] is True and body["observation"]["content"] == {"id": "o-1"}
    assert IdempotencyRecord.objects.get().result == {"id": "o-1"}


def test_a_bad_timeout_header_is_400(api: ApiClient) -> None:
    response = api.client.get(
        "/api/v1/tools", headers={**api._headers(), "X-Ledger-Timeout-Ms": "soon"}, secure=True
    )
    _problem(response, 400, "INVALID_INPUT")


def test_no_reservation_is_made_for_a_caller_past_its_deadline(api: ApiClient) -> None:
    api.start_run()
    before = _counts()
    response = api.client.post(
        "/api/v1/calls",
        data=json.dumps(
            {"run_id": "run-1", "step_id": "s", "tool": "create_order", "input": {"cart": "c"}}
        ),
        content_type="application/json",
        headers={**api._headers(), "X-Ledger-Timeout-Ms": "0"},
        secure=True,
    )
    _problem(response, 503, "DEADLINE_EXCEEDED")
    assert response["Retry-After"]
    assert _counts()[0] == before[0]  # no record


def test_anonymous_clients_never_reach_a_view(quiet_tracebacks) -> None:
    response = Client().post(
        "/api/v1/runs", data="{}", content_type="application/json", secure=True
    )
    _problem(response, 401, "UNAUTHENTICATED")


def test_the_openapi_document_names_each_status_once(client) -> None:
    """The docs page reads the document as YAML, which refuses a key written twice (400 and
    "400" are one key in JSON)."""
    raw = client.get("/api/v1/openapi.json").content.decode()
    document = json.loads(raw, object_pairs_hook=_refuse_duplicates)
    assert document["paths"]


def _refuse_duplicates(pairs: list[tuple[str, object]]) -> dict[str, object]:
    keys = [key for key, _ in pairs]
    assert len(keys) == len(set(keys)), sorted(k for k in keys if keys.count(k) > 1)
    return dict(pairs)
