"""Reconciliation outcomes, run in-process against the sandbox and real files."""

from __future__ import annotations

import hashlib
import os
from datetime import timedelta
from pathlib import Path

import httpx
import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from ledger.domain import EscalationKind, RecordState
from ledger.models import (
    ApprovalRequest,
    AuditEvent,
    IdempotencyRecord,
    LedgerEntry,
    WorkspaceRoot,
    WritePlan,
)
from ledger.records import Outcome, complete_execution
from reconcile.filehash import PathRefused, confined_path, file_sha256
from reconcile.models import DownstreamAdapter, ReconcileAttempt
from reconcile.operator_actions import escalate
from reconcile.services import due_records, reconcile_record
from sandbox.server import SandboxServer
from tests.factories import make_entry, refresh, reserve
from tests.sandbox_fixtures import arm

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("private_downstreams")]


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def _unknown(tenant, tool, key: str = "k-1") -> IdempotencyRecord:
    record = reserve(tenant, tool, key=key).record
    return complete_execution(record=record, fencing_token=1, outcome=Outcome.UNCERTAIN, actor="w")


def _adapter(tenant, tool, sandbox: SandboxServer, **kwargs) -> DownstreamAdapter:
    return DownstreamAdapter.objects.create(
        tenant=tenant,
        tool=tool,
        url_template=f"{sandbox.url}/orders/objects/by-key/{{key}}",
        found_statuses=[200],
        not_found_statuses=[404],
        grace_seconds=0,
        **kwargs,
    )


def _attempts(record: IdempotencyRecord) -> list[str]:
    return list(
        ReconcileAttempt.objects.filter(record=record)
        .order_by("attempt")
        .values_list("outcome", flat=True)
    )


def test_found_downstream_settles_succeeded_with_evidence(
    tenant,
    create_order,
    sandbox: SandboxServer,
) -> None:
    record = _unknown(tenant, create_order)
    httpx.post(
        f"{sandbox.url}/orders/objects",
        json={"reference": "c", "email": "a@b.co"},
        headers={"Idempotency-Key": record.key},
    )
    _adapter(tenant, create_order, sandbox)
    assert reconcile_record(record.pk, worker="w1") == "succeeded"
    settled = refresh(record)
    assert settled.state == RecordState.SUCCEEDED
    evidence = settled.result["evidence"]
    assert evidence["idempotency_key"] == record.key
    assert "a@b.co" not in str(evidence)  # redacted
    assert _attempts(record) == ["found"]
    assert AuditEvent.objects.filter(action="reconcile.attempt", target_id=str(record.pk)).exists()
    # The look-up's own bookkeeping is written with the resolution.
    assert settled.reconcile_attempts == 1 and settled.reconcile_claimed_until is None


def test_a_look_up_that_settles_costs_four_statements(
    tenant, create_order, sandbox: SandboxServer
) -> None:
    """Claim (with every read), lock, the attempt with its audit event, and the transition
    (record, entries, approvals, audit): a look-up runs for every unknown record, so an
    extra round trip here costs every worker (docs/performance.md)."""
    record = _unknown(tenant, create_order)
    entry = make_entry(tenant, create_order, status="uncertain")
    LedgerEntry.objects.filter(pk=entry.pk).update(record=record)
    httpx.post(
        f"{sandbox.url}/orders/objects",
        json={"reference": "c"},
        headers={"Idempotency-Key": record.key},
    )
    _adapter(tenant, create_order, sandbox)
    with CaptureQueriesContext(connection) as captured:
        assert reconcile_record(record.pk) == "succeeded"
    control = ("BEGIN", "COMMIT", "SAVEPOINT", "RELEASE SAVEPOINT")
    sent = [q["sql"] for q in captured.captured_queries if not q["sql"].startswith(control)]
    assert len(sent) == 4, sent
    settled = refresh(record)
    assert settled.state == RecordState.SUCCEEDED and settled.reconcile_attempts == 1
    assert LedgerEntry.objects.get(pk=entry.pk).status == "succeeded"
    assert (
        AuditEvent.objects.filter(action="reconcile.attempt", target_id=str(record.pk)).count() == 1
    )


def test_not_found_after_grace_is_failed_final_and_safe_to_retry(
    tenant,
    create_order,
    sandbox: SandboxServer,
) -> None:
    record = _unknown(tenant, create_order)
    _adapter(tenant, create_order, sandbox)
    entry = make_entry(tenant, create_order, status="uncertain")
    LedgerEntry.objects.filter(pk=entry.pk).update(record=record)
    assert reconcile_record(record.pk) == "failed_final"
    settled = refresh(record)
    assert settled.state == RecordState.FAILED_FINAL and settled.error_retryable
    assert settled.error["code"] == "NOT_EXECUTED"
    # The look-up's bookkeeping and the call's entry are written with the resolution.
    assert settled.reconcile_attempts == 1 and settled.reconcile_claimed_until is None
    assert LedgerEntry.objects.get(pk=entry.pk).status == "failed"


def test_not_found_within_grace_waits(tenant, create_order, sandbox: SandboxServer) -> None:
    record = _unknown(tenant, create_order)
    DownstreamAdapter.objects.create(
        tenant=tenant,
        tool=create_order,
        grace_seconds=300,
        url_template=f"{sandbox.url}/orders/objects/by-key/{{key}}",
    )
    assert reconcile_record(record.pk) == "not-found-in-grace"
    waiting = refresh(record)
    assert waiting.state == RecordState.UNKNOWN
    assert waiting.next_reconcile_at == waiting.uncertain_since + timedelta(seconds=300)
    assert _attempts(record) == ["not_found_in_grace"]


@pytest.mark.parametrize(
    ("fault", "outcome"),
    [("error_5xx", "unreachable"), ("reset", "unreachable"), ("malformed", "malformed")],
)
def test_bad_downstream_answers_leave_it_unknown_and_retry_later(
    tenant,
    create_order,
    sandbox: SandboxServer,
    fault: str,
    outcome: str,
) -> None:
    record = _unknown(tenant, create_order)
    httpx.post(f"{sandbox.url}/orders/objects", json={}, headers={"Idempotency-Key": record.key})
    _adapter(tenant, create_order, sandbox)
    arm(sandbox, service="orders", operation="lookup", mode=fault)
    assert reconcile_record(record.pk) == "retry-later"
    waiting = refresh(record)
    assert waiting.state == RecordState.UNKNOWN and waiting.next_reconcile_at > timezone.now()
    assert _attempts(record) == [outcome]
    # Still unknown: the look-up's bookkeeping is written on its own.
    assert waiting.reconcile_attempts == 1 and waiting.reconcile_claimed_until is None


@pytest.mark.parametrize(
    "url",
    [
        "{base}/no-such-prefix/objects/by-key/{{key}}",  # a 404 from a wrong URL
        "{base}/orders/objects/by-key/other-key#{{key}}",  # a 404 about another key
    ],
)
def test_a_404_that_does_not_say_not_found_for_the_key_is_not_taken_as_not_found(
    tenant, create_order, sandbox: SandboxServer, url: str
) -> None:
    record = _unknown(tenant, create_order)
    adapter = _adapter(tenant, create_order, sandbox)
    adapter.url_template = url.format(base=sandbox.url)
    adapter.save()
    assert reconcile_record(record.pk) == "retry-later"
    assert refresh(record).state == RecordState.UNKNOWN
    assert _attempts(record) == ["unreachable"]


def test_slow_downstream_times_out(tenant, create_order, sandbox: SandboxServer) -> None:
    record = _unknown(tenant, create_order)
    _adapter(tenant, create_order, sandbox, timeout_seconds=0.3)
    arm(sandbox, service="orders", operation="lookup", mode="latency", latency_ms=1500)
    assert reconcile_record(record.pk) == "retry-later"
    assert _attempts(record) == ["timeout"]


def test_unreachable_is_escalated_after_max_attempts(tenant, create_order) -> None:
    record = _unknown(tenant, create_order)
    DownstreamAdapter.objects.create(
        tenant=tenant,
        tool=create_order,
        max_attempts=3,
        url_template="http://127.0.0.1:9/by-key/{key}",
    )
    results = []
    for _ in range(3):
        IdempotencyRecord.objects.filter(pk=record.pk).update(next_reconcile_at=None)
        results.append(reconcile_record(record.pk))
    assert results == ["retry-later", "retry-later", "escalated"]
    escalated = refresh(record)
    assert escalated.escalated_at is not None and "3 look-ups failed" in escalated.escalation_reason
    assert escalated.escalation_kind == EscalationKind.LOOKUPS_EXHAUSTED
    assert reconcile_record(record.pk) == "skipped"  # a human's turn now
    assert record.pk not in due_records(limit=100)


def test_no_adapter_escalates_to_a_human(tenant, create_order) -> None:
    record = _unknown(tenant, create_order)
    assert reconcile_record(record.pk) == "escalated"
    assert "no downstream adapter" in refresh(record).escalation_reason
    assert refresh(record).escalation_kind == EscalationKind.NO_CHECK


def test_a_settled_record_is_left_alone(tenant, create_order, sandbox) -> None:
    record = reserve(tenant, create_order).record
    complete_execution(record=record, fencing_token=1, outcome=Outcome.SUCCEEDED, actor="w")
    assert reconcile_record(record.pk) == "skipped"
    assert not ReconcileAttempt.objects.exists()


# --- file hash ---------------------------------------------------------------------------


@pytest.fixture
def workspace(tenant, tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    root.mkdir()
    WorkspaceRoot.objects.create(tenant=tenant, name="repo", path=str(root))
    return root


def _write_plan(tenant, path: str, before: str, after: str) -> IdempotencyRecord:
    from tests.factories import make_tool

    tool = make_tool(tenant, "write_file")
    record = reserve(tenant, tool, key=f"w-{path}").record
    entry = make_entry(tenant, tool, status="started")
    entry.record = record
    entry.save()
    WritePlan.objects.create(
        tenant=tenant,
        entry=entry,
        workspace="repo",
        path=path,
        before_hash=_sha(before),
        after_hash=_sha(after),
        diff="-a\n+b\n",
    )
    return complete_execution(record=record, fencing_token=1, outcome=Outcome.UNCERTAIN, actor="w")


def test_file_already_applied_is_marked_succeeded(tenant, workspace: Path) -> None:
    (workspace / "app.py").write_text("new")
    record = _write_plan(tenant, "app.py", "old", "new")
    assert reconcile_record(record.pk) == "succeeded"
    assert refresh(record).executions == 1  # nothing was replayed


def test_file_apply_again_asks_for_approval(tenant, workspace: Path) -> None:
    (workspace / "app.py").write_text("old")
    record = _write_plan(tenant, "app.py", "old", "new")
    assert reconcile_record(record.pk) == "escalated"
    assert ApprovalRequest.objects.get(record=record).state == "pending"
    assert refresh(record).state == RecordState.UNKNOWN
    assert refresh(record).escalation_kind == EscalationKind.WRITE_NOT_LANDED


def test_file_changed_by_someone_else_is_a_conflict(tenant, workspace: Path) -> None:
    (workspace / "app.py").write_text("theirs")
    record = _write_plan(tenant, "app.py", "old", "new")
    assert reconcile_record(record.pk) == "escalated"
    assert "Write conflict" in refresh(record).escalation_reason
    assert refresh(record).escalation_kind == EscalationKind.WRITE_CONFLICT
    event = AuditEvent.objects.get(action="reconcile.escalated", target_id=str(record.pk))
    assert event.after == {"kind": "write_conflict"}
    assert not ApprovalRequest.objects.exists()


def test_a_write_conflict_keeps_the_escalation_an_operator_made_during_the_check(
    tenant, workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The file is read outside any transaction: an operator may escalate the call meanwhile,
    and what they told the next human stands."""
    (workspace / "app.py").write_text("theirs")
    record = _write_plan(tenant, "app.py", "old", "new")

    def read_while_an_operator_escalates(root: str, path: str) -> str:
        escalate(record=record, actor="olga", reason="the customer called: leave it to me")
        return file_sha256(root, path)

    monkeypatch.setattr("reconcile.services.file_sha256", read_while_an_operator_escalates)
    reconcile_record(record.pk)
    settled = refresh(record)
    assert settled.escalation_kind == EscalationKind.OPERATOR
    assert settled.escalation_reason == "the customer called: leave it to me"
    assert AuditEvent.objects.filter(action="reconcile.escalated").count() == 1


@pytest.mark.parametrize("path", ["../secret.txt", "/etc/passwd", "a/../../secret.txt"])
def test_paths_leaving_the_workspace_are_refused(tenant, workspace: Path, path: str) -> None:
    record = _write_plan(tenant, path, "old", "new")
    assert reconcile_record(record.pk) == "escalated"
    assert _attempts(record) == ["refused"]


def test_symlink_escape_is_refused(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    root.mkdir()
    (tmp_path / "secret.txt").write_text("top secret")
    os.symlink(tmp_path / "secret.txt", root / "link.txt")
    os.symlink(tmp_path, root / "dir")
    for relative in ("link.txt", "dir/secret.txt"):
        with pytest.raises(PathRefused):
            confined_path(root, relative)
    (root / "inside.txt").write_text("x")
    os.symlink(root / "inside.txt", root / "ok.txt")
    assert file_sha256(root, "ok.txt") == _sha("x")
