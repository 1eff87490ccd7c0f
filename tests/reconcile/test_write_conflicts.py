"""A write conflict's evidence is the file as it is now: the worker reads it under the
workspace root and keeps it, redacted, with whether the plan's diff still applies and the
change applying it would make. The operator sees it beside the plan on the call's page."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from ledger.models import IdempotencyRecord, Tenant, WorkspaceRoot
from reconcile.models import ReconcileAttempt
from reconcile.services import reconcile_record
from reconcile.tasks import snapshot_write_conflicts
from reconcile.write_conflicts import due
from tests.console.conftest import make_user, signed_in
from tests.write_conflicts import (
    ELSEWHERE,
    REST,
    SAME_LINE,
    lost_write,
    replay_conflict,
    sha,
    workspace_file,
)

pytestmark = pytest.mark.django_db


@pytest.fixture
def workspace(tenant: Tenant, tmp_path: Path) -> Path:
    return workspace_file(tenant, tmp_path)


def _snapshot(record: IdempotencyRecord) -> dict[str, Any]:
    attempt = ReconcileAttempt.objects.filter(record=record).latest("pk")
    assert attempt.outcome == "conflict"
    return attempt.evidence


def test_a_replayed_conflict_gets_the_file_as_it_is_now_and_the_change_the_plan_would_make(
    tenant: Tenant, workspace: Path
) -> None:
    record = replay_conflict(tenant, workspace, ELSEWHERE)
    assert due() == [record.pk]

    snapshot_write_conflicts()

    evidence = _snapshot(record)
    assert evidence["current_hash"] == sha(ELSEWHERE)
    assert evidence["snapshot"]["content"] == ELSEWHERE
    assert evidence["snapshot"]["plan_applies"] is True
    assert "-retries: 0\n+retries: 3" in evidence["snapshot"]["applying_now"]
    assert "timeout" not in evidence["snapshot"]["applying_now"]  # only the plan's hunk
    # Nothing was written and a human still decides; one snapshot an escalation.
    assert workspace.read_text() == ELSEWHERE
    record.refresh_from_db()
    assert record.state == "unknown" and record.escalation_kind == "write_conflict"
    assert due() == []
    assert snapshot_write_conflicts() == []


def test_a_plan_whose_lines_were_changed_no_longer_applies_and_shows_the_file(
    tenant: Tenant, workspace: Path
) -> None:
    record = replay_conflict(tenant, workspace, SAME_LINE)
    snapshot_write_conflicts()
    snapshot = _snapshot(record)["snapshot"]
    assert snapshot == {
        "size": len(SAME_LINE),
        "content": SAME_LINE,
        "plan_applies": False,
        "applying_now": "",
    }


def test_the_workers_own_file_check_keeps_the_snapshot_with_the_conflict(
    tenant: Tenant, workspace: Path
) -> None:
    workspace.write_text(ELSEWHERE)
    _api, first = lost_write(tenant)
    record = IdempotencyRecord.objects.get(key=first["idempotency_key"])

    assert reconcile_record(record.pk, worker="w") == "escalated"

    assert _snapshot(record)["snapshot"]["content"] == ELSEWHERE
    assert due() == []  # the check's own attempt is the snapshot of this escalation


def test_secrets_in_the_file_are_redacted_and_restricted_data_keeps_only_a_hash(
    tenant: Tenant, workspace: Path
) -> None:
    secret = "name: shop\nretries: 0\npassword: hunter2-correct-horse\n"
    record = replay_conflict(tenant, workspace, secret)
    snapshot_write_conflicts()
    content = _snapshot(record)["snapshot"]["content"]
    assert "hunter2" not in content and "name: shop" in content

    IdempotencyRecord.objects.all().delete()
    record = replay_conflict(tenant, workspace, secret, data_classification="restricted")
    snapshot_write_conflicts()
    kept = _snapshot(record)
    assert kept["redacted"] == "restricted" and "hunter2" not in str(kept)


def test_an_unreadable_or_unregistered_workspace_is_said_once_and_nothing_else_happens(
    tenant: Tenant, workspace: Path
) -> None:
    record = replay_conflict(tenant, workspace, ELSEWHERE)
    workspace.unlink()
    workspace.mkdir()  # a directory where the file was: it cannot be read
    snapshot_write_conflicts()
    attempt = ReconcileAttempt.objects.get(record=record)
    assert attempt.outcome == "unreachable" and "cannot read the file" in attempt.detail
    assert due() == []

    WorkspaceRoot.objects.all().delete()
    IdempotencyRecord.objects.all().delete()
    workspace.rmdir()
    replay_conflict(tenant, workspace, ELSEWHERE)
    assert due() == []  # no workspace the worker can read: nothing to snapshot


def test_the_operator_sees_the_file_now_and_the_plan_beside_the_conflict(
    tenant: Tenant, workspace: Path, django_user_model: Any
) -> None:
    now = f"<b>name</b>: shop\nretries: 0\n{REST}"
    record = replay_conflict(tenant, workspace, now)
    snapshot_write_conflicts()
    operator = signed_in(make_user(django_user_model, "olga", tenant, "operator"))

    page = operator.get(f"/unknown/{record.pk}/", secure=True).content.decode()

    assert "The file now" in page and "Write plan" in page
    assert "&lt;b&gt;name&lt;/b&gt;: shop" in page and "<b>name</b>" not in page
    assert "The plan&#x27;s diff no longer applies" in page or "no longer applies" in page
    assert sha(now) in page  # the whole hash, not its first characters
    # Neither outcome is the default: the evidence points to none.
    assert 'class="primary"' not in page.split('id="unknown-resolve"')[1].split("</form>")[0]
