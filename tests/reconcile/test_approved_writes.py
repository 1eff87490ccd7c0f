"""An approved write no runtime will retry is applied by the ledger's worker, once, into the
real workspace file, only where the plan makes that safe: the file is still as planned and the
stored diff gives exactly the approved content. Everything else is left to an operator, with
the reason said, and nothing is written."""

from __future__ import annotations

import hashlib
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.db.models.functions import Now

from ledger.models import ApprovalRequest, IdempotencyRecord, LedgerEntry, Tenant, WorkspaceRoot
from ledger.records import decide_approval
from reconcile.approved_writes import RUNTIME_GRACE, apply_approved_write, due
from reconcile.tasks import apply_approved_writes
from tests.api.conftest import client_for
from tests.console.conftest import make_user

pytestmark = pytest.mark.django_db

BEFORE = "name: shop\nretries: 0\n"
AFTER = "name: shop\nretries: 3\n"
DIFF = (
    "--- a/config/app.yaml\n+++ b/config/app.yaml\n@@ -1,2 +1,2 @@\n name: shop\n"
    "-retries: 0\n+retries: 3\n"
)


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


@pytest.fixture
def workspace(tenant: Tenant, tmp_path: Path) -> Path:
    WorkspaceRoot.objects.create(tenant=tenant, name="repo", path=str(tmp_path))
    (tmp_path / "config").mkdir()
    (tmp_path / "config" / "app.yaml").write_text(BEFORE)
    return tmp_path / "config" / "app.yaml"


@pytest.fixture
def approver(django_user_model: Any, tenant: Tenant) -> Any:
    return make_user(django_user_model, "ann", tenant, "approver")


def _approved_write(
    tenant: Tenant, approver: Any, *, diff: str = DIFF, finish: bool = True
) -> IdempotencyRecord:
    """A write whose response was lost, found not landed by the runtime's replay (the file
    still as before), applying it again approved by Ann; its run finished unless ``finish``
    is false."""
    api = client_for(tenant)
    api.start_run("run-1")
    plan = {
        "workspace": "repo",
        "path": "config/app.yaml",
        "before_hash": _sha(BEFORE),
        "after_hash": _sha(AFTER),
        "diff": diff,
    }
    first = api.call("write_file", {"path": "config/app.yaml"}, write_plan=plan).json()
    api.post(f"/calls/{first['call_id']}/complete", {"fencing_token": 1, "outcome": "uncertain"})
    api.post(f"/calls/{first['call_id']}/replay", {"current_hash": _sha(BEFORE)})
    record = IdempotencyRecord.objects.get(key=first["idempotency_key"])
    assert record.escalation_kind == "write_not_landed", record.escalation_reason
    approval = ApprovalRequest.objects.get(record=record)
    decide_approval(approval=approval, user=approver, approve=True, reason="")
    if finish:
        assert api.post("/runs/run-1/finish", {"termination_reason": "done"}).status_code == 200
    return record


def test_the_worker_applies_an_approved_write_once_its_run_is_over(
    tenant: Tenant, approver: Any, workspace: Path
) -> None:
    record = _approved_write(tenant, approver)
    assert due() == [record.pk]
    assert apply_approved_writes() == ["applied"]
    assert workspace.read_text() == AFTER
    record.refresh_from_db()
    assert record.state == "succeeded"
    assert record.result["applied_by"] == "worker"
    assert ApprovalRequest.objects.get(record=record).state == "consumed"
    # Again (a second beat, a redelivered message): nothing is due, nothing is written.
    workspace.write_text(AFTER + "# edited by hand since\n")
    assert due() == [] and apply_approved_write(record.pk, worker="w2") == "skipped"
    assert workspace.read_text().endswith("# edited by hand since\n")


def test_a_late_retry_of_the_runtime_gets_what_the_worker_applied(
    tenant: Tenant, approver: Any, workspace: Path
) -> None:
    """The runtime came back after its grace: its retry is answered from the record, and the
    file is written once."""
    record = _approved_write(tenant, approver, finish=False)
    ApprovalRequest.objects.filter(record=record).update(
        decided_at=Now() - RUNTIME_GRACE - timedelta(seconds=1)
    )
    assert apply_approved_writes() == ["applied"]
    entry = LedgerEntry.objects.filter(record=record).earliest("pk")
    again = client_for(tenant).call("write_file", entry.input, step_id="step-again")
    assert again.json()["decision"] == "recorded_result", again.content
    assert again.json()["observation"]["content"]["applied_by"] == "worker"
    assert IdempotencyRecord.objects.get(pk=record.pk).executions == record.executions


def test_while_the_run_goes_on_the_runtime_has_its_grace_to_retry(
    tenant: Tenant, approver: Any, workspace: Path
) -> None:
    record = _approved_write(tenant, approver, finish=False)
    assert due() == []
    assert workspace.read_text() == BEFORE
    ApprovalRequest.objects.filter(record=record).update(
        decided_at=Now() - RUNTIME_GRACE - timedelta(seconds=1)
    )
    assert due() == [record.pk]
    assert apply_approved_writes() == ["applied"] and workspace.read_text() == AFTER


def test_a_runtime_that_used_the_approval_first_leaves_the_worker_nothing(
    tenant: Tenant, approver: Any, workspace: Path
) -> None:
    record = _approved_write(tenant, approver)
    ApprovalRequest.objects.filter(record=record).update(state="consumed")
    assert apply_approved_write(record.pk, worker="w") == "skipped"
    assert workspace.read_text() == BEFORE
    assert IdempotencyRecord.objects.get(pk=record.pk).state == "unknown"


def test_a_file_changed_since_is_a_conflict_and_nothing_is_written(
    tenant: Tenant, approver: Any, workspace: Path
) -> None:
    record = _approved_write(tenant, approver)
    workspace.write_text("name: shop\nretries: 99\n")
    assert apply_approved_write(record.pk, worker="w") == "conflict"
    assert workspace.read_text() == "name: shop\nretries: 99\n"
    record.refresh_from_db()
    assert record.state == "unknown" and record.escalation_kind == "write_conflict"
    assert "the worker wrote nothing" in record.escalation_reason
    assert ApprovalRequest.objects.get(record=record).state == "approved"  # not used
    assert due() == []  # an operator's now


@pytest.mark.parametrize(
    "diff",
    [
        pytest.param(DIFF.replace("retries: 3", "retries: [REDACTED]"), id="redacted"),
        pytest.param(DIFF.rsplit("\n", 2)[0] + "\n", id="cut"),
        pytest.param("", id="none"),
    ],
)
def test_a_diff_that_does_not_give_the_approved_content_is_left_to_an_operator(
    tenant: Tenant, approver: Any, workspace: Path, diff: str
) -> None:
    record = _approved_write(tenant, approver, diff=diff)
    assert apply_approved_write(record.pk, worker="w") == "cannot-apply"
    assert workspace.read_text() == BEFORE
    record.refresh_from_db()
    assert record.state == "unknown" and record.escalation_kind == "operator"
    assert "apply the diff by hand" in record.escalation_reason
    assert due() == []


def test_a_write_found_landed_is_settled_without_writing(
    tenant: Tenant, approver: Any, workspace: Path
) -> None:
    """A worker that died after replacing the file, before its transaction committed: the
    next pass finds the approved content and settles the call, writing nothing."""
    record = _approved_write(tenant, approver)
    workspace.write_text(AFTER)
    before = workspace.stat().st_mtime_ns
    assert apply_approved_write(record.pk, worker="w") == "already-applied"
    assert workspace.stat().st_mtime_ns == before
    record.refresh_from_db()
    assert record.state == "succeeded" and record.result["applied_by"] == "found"
