"""What the ledger stores of an action's result, error and evidence is redacted by the action's
data classification, whoever finds the outcome: its executor's report, a downstream look-up, a
file check, a human (DESIGN sections 4 and 10; ``ledger.redaction.redact_for_storage``)."""

from __future__ import annotations

import hashlib
import importlib
from pathlib import Path
from typing import Any

import httpx
import pytest
from django.apps import apps
from django.db import connection

from ledger.domain import DataClassification
from ledger.models import IdempotencyRecord, WorkspaceRoot
from ledger.records import Outcome, complete_execution, resolve_unknown
from ledger.redaction import CONFIDENTIAL_MAX_TEXT
from reconcile.models import DownstreamAdapter, ReconcileAttempt
from reconcile.services import reconcile_record
from sandbox.server import SandboxServer
from tests.api.conftest import ApiClient, client_for
from tests.factories import make_tool, refresh

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("private_downstreams")]

EMAIL = "ann@example.com"


@pytest.fixture
def api(tenant) -> ApiClient:
    return client_for(tenant)


def _hash_only(value: Any) -> bool:
    """Whether ``value`` is what a restricted action keeps: its hash (and an error's code)."""
    return (
        isinstance(value, dict)
        and value.get("redacted") == "restricted"
        and set(value) <= {"redacted", "sha256", "code"}
    )


def _call(api: ApiClient, tool: str, classification: str, **extra: Any) -> dict[str, Any]:
    api.start_run()
    answer = api.call(tool, {"cart": "c-1"}, data_classification=classification, **extra)
    assert answer.json()["decision"] == "execute", answer.content
    return answer.json()


def _uncertain(api: ApiClient, call: dict[str, Any]) -> IdempotencyRecord:
    api.post(f"/calls/{call['call_id']}/complete", {"fencing_token": 1, "outcome": "uncertain"})
    record = IdempotencyRecord.objects.get(key=call["idempotency_key"])
    assert record.state == "unknown"
    return record


def _found_downstream(tenant, sandbox: SandboxServer, record: IdempotencyRecord, **body) -> None:
    """The action happened downstream (under its key); the tool's adapter can look it up."""
    made = httpx.post(
        f"{sandbox.url}/orders/objects", json=body, headers={"Idempotency-Key": record.key}
    )
    assert made.status_code == 201, made.text
    DownstreamAdapter.objects.create(
        tenant=tenant,
        tool=record.tool,
        url_template=f"{sandbox.url}/orders/objects/by-key/{{key}}",
        found_statuses=[200],
        not_found_statuses=[404],
        grace_seconds=0,
    )


def test_a_restricted_action_found_by_a_look_up_keeps_only_hashes(
    tenant, api, create_order, sandbox
) -> None:
    record = _uncertain(api, _call(api, "create_order", "restricted"))
    _found_downstream(tenant, sandbox, record, reference="c-1", email=EMAIL)
    assert reconcile_record(record.pk, worker="w") == "succeeded"
    assert _hash_only(refresh(record).result)
    assert _hash_only(ReconcileAttempt.objects.get(record=record).evidence)


def test_a_confidential_action_found_by_a_look_up_keeps_less_text(
    tenant, api, create_order, sandbox
) -> None:
    note = "n" * (CONFIDENTIAL_MAX_TEXT + 300)
    record = _uncertain(api, _call(api, "create_order", "confidential"))
    _found_downstream(tenant, sandbox, record, reference="c-1", note=note)
    assert reconcile_record(record.pk, worker="w") == "succeeded"
    for stored in (
        refresh(record).result["evidence"],
        ReconcileAttempt.objects.get(record=record).evidence,
    ):
        kept = stored["payload"]["note"]
        assert kept.startswith("n" * CONFIDENTIAL_MAX_TEXT) and note not in kept


def test_a_restricted_action_settled_by_a_human_keeps_only_hashes(api, create_order) -> None:
    record = _uncertain(api, _call(api, "create_order", "restricted"))
    resolve_unknown(
        record=record,
        outcome=Outcome.SUCCEEDED,
        actor="olga",
        result={"order": "o-1", "email": EMAIL},
        detail="found it in the shop's back office",
    )
    assert _hash_only(refresh(record).result)


def test_a_restricted_failure_settled_by_a_human_keeps_only_its_hash_and_code(
    api, create_order
) -> None:
    record = _uncertain(api, _call(api, "create_order", "restricted"))
    resolve_unknown(
        record=record,
        outcome=Outcome.FAILED,
        actor="olga",
        error={"code": "NOT_EXECUTED", "message": f"no order for {EMAIL}"},
        detail="the shop has no such order",
    )
    error = refresh(record).error
    assert _hash_only(error) and error["code"] == "NOT_EXECUTED"


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def test_a_restricted_write_found_applied_by_the_file_check_keeps_only_hashes(
    tenant, api, tmp_path: Path
) -> None:
    make_tool(tenant, "write_file")
    root = tmp_path / "ws"
    root.mkdir()
    (root / "app.py").write_text("new")
    WorkspaceRoot.objects.create(tenant=tenant, name="repo", path=str(root))
    plan = {
        "workspace": "repo",
        "path": "app.py",
        "before_hash": _sha("old"),
        "after_hash": _sha("new"),
    }
    record = _uncertain(api, _call(api, "write_file", "restricted", write_plan=plan))
    assert reconcile_record(record.pk, worker="w") == "succeeded"
    assert _hash_only(refresh(record).result)
    assert _hash_only(ReconcileAttempt.objects.get(record=record).evidence)


def test_a_restricted_write_found_applied_by_the_runtimes_hash_keeps_only_hashes(
    tenant, api
) -> None:
    make_tool(tenant, "write_file")
    plan = {
        "workspace": "repo",
        "path": "app.py",
        "before_hash": _sha("old"),
        "after_hash": _sha("new"),
    }
    call = _call(api, "write_file", "restricted", write_plan=plan)
    record = _uncertain(api, call)
    replay = api.post(f"/calls/{call['call_id']}/replay", {"current_hash": _sha("new")})
    assert replay.json()["decision"] == "recorded_result", replay.content
    assert _hash_only(refresh(record).result)


def test_a_report_without_its_call_is_redacted_by_the_actions_classification(
    api, create_order
) -> None:
    """A worker's report (a compensation's) names no call: the action's classification holds."""
    call = _call(api, "create_order", "restricted")
    record = IdempotencyRecord.objects.get(key=call["idempotency_key"])
    complete_execution(
        record=record,
        fencing_token=1,
        outcome=Outcome.SUCCEEDED,
        actor="worker:w",
        result={"order": "o-1", "email": EMAIL},
    )
    assert _hash_only(refresh(record).result)


def test_a_report_of_a_call_stricter_than_its_action_is_redacted_as_the_call_asks(
    api, read_file
) -> None:
    """A duplicate that runs the action again (an idempotent one, after an unknown outcome)
    with a stricter classification: its report is never stored with less redaction than its
    caller asked for."""
    first = _call(api, "read_file", "internal", business_object_id="f-1")
    record = _uncertain(api, first)
    again = api.call(
        "read_file", {"cart": "c-1"}, business_object_id="f-1", data_classification="restricted"
    ).json()
    assert again["decision"] == "execute", again
    done = api.post(
        f"/calls/{again['call_id']}/complete",
        {
            "fencing_token": again["lease"]["fencing_token"],
            "outcome": "succeeded",
            "result": {"text": f"mail {EMAIL}"},
        },
    )
    assert done.status_code == 200, done.content
    assert _hash_only(refresh(record).result)


@pytest.mark.parametrize("classification", list(DataClassification))
def test_an_action_keeps_the_classification_its_first_call_declared(
    api, create_order, classification: DataClassification
) -> None:
    call = _call(api, "create_order", classification.value)
    record = IdempotencyRecord.objects.get(key=call["idempotency_key"])
    assert record.data_classification == classification


def test_the_migration_gives_earlier_records_the_strictest_classification_of_their_calls(
    api, create_order
) -> None:
    migration = importlib.import_module("ledger.migrations.0019_record_data_classification")
    api.start_run()
    calls = {
        "mixed": ["internal", "restricted", "confidential"],
        "public": ["public", "public"],
        "one": ["confidential"],
    }
    keys = {}
    for name, classifications in calls.items():
        for classification in classifications:
            answer = api.call(
                "create_order",
                {"cart": name},
                business_object_id=name,
                data_classification=classification,
            ).json()
            keys[name] = answer["idempotency_key"]
    IdempotencyRecord.objects.update(data_classification="internal")  # as the column's default
    with connection.schema_editor() as schema_editor:
        migration.classify_earlier_records(apps, schema_editor)
    found = {
        name: IdempotencyRecord.objects.get(key=key).data_classification
        for name, key in keys.items()
    }
    assert found == {"mixed": "restricted", "public": "public", "one": "confidential"}
