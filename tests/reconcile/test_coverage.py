"""Which check a worker makes of an unknown call is chosen in one place,
``reconcile.coverage.plan_check``: the worker makes that check, and what a rollback reports no
worker can settle is what the worker escalates, in the same words."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from ledger.models import IdempotencyRecord, Tenant, WorkspaceRoot, WritePlan
from ledger.records import Outcome, complete_execution
from reconcile.coverage import NO_ADAPTER, NOT_REGISTERED, PlannedCheck, cannot_look_up, plan_check
from reconcile.models import DownstreamAdapter, ReconcileAttempt
from reconcile.services import reconcile_record
from tests.factories import make_entry, make_tool, refresh, reserve

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("private_downstreams")]

Kind = ReconcileAttempt.Kind

#: (the call has a write plan, its workspace is registered, its tool has an adapter) -> the
#: check the worker makes, and why it cannot (empty when it can).
SITUATIONS = {
    (True, True, True): (Kind.FILE_HASH, ""),
    (True, True, False): (Kind.FILE_HASH, ""),
    (True, False, True): (Kind.FILE_HASH, NOT_REGISTERED(workspace="'repo'")),
    (True, False, False): (Kind.FILE_HASH, NOT_REGISTERED(workspace="'repo'")),
    (False, False, True): (Kind.DOWNSTREAM, ""),
    (False, False, False): (Kind.NONE, NO_ADAPTER(tool="write_file")),
}


def _situation_id(situation: tuple[bool, bool, bool]) -> str:
    planned, registered, adapter = situation
    return "-".join(
        (
            "plan" if planned else "no_plan",
            "registered" if registered else "unregistered",
            "adapter" if adapter else "no_adapter",
        )
    )


def _unknown_call(
    tenant: Tenant, tmp_path: Path, *, planned: bool, registered: bool, adapter: bool
) -> IdempotencyRecord:
    tool = make_tool(tenant, "write_file")
    record = reserve(tenant, tool, key="w-1").record
    if planned:
        entry = make_entry(tenant, tool, status="started")
        entry.record = record
        entry.save(update_fields=["record"])
        sha = hashlib.sha256(b"a").hexdigest()
        WritePlan.objects.create(
            tenant=tenant,
            entry=entry,
            workspace="repo",
            path="a.py",
            before_hash=sha,
            after_hash=sha,
        )
    if registered:
        (tmp_path / "a.py").write_text("a")
        WorkspaceRoot.objects.create(tenant=tenant, name="repo", path=str(tmp_path))
    if adapter:
        DownstreamAdapter.objects.create(
            tenant=tenant, tool=tool, url_template="http://127.0.0.1:9/by-key/{key}"
        )
    return complete_execution(record=record, fencing_token=1, outcome=Outcome.UNCERTAIN, actor="w")


@pytest.mark.parametrize("situation", SITUATIONS, ids=map(_situation_id, SITUATIONS))
def test_the_worker_makes_the_check_planned_and_the_report_says_why_it_cannot(
    tenant: Tenant, tmp_path: Path, situation: tuple[bool, bool, bool]
) -> None:
    planned, registered, adapter = situation
    kind, missing = SITUATIONS[situation]
    record = _unknown_call(
        tenant, tmp_path, planned=planned, registered=registered, adapter=adapter
    )
    assert plan_check(
        record,
        workspace="repo" if planned else None,
        registered=registered,
        has_adapter=adapter,
    ) == PlannedCheck(kind, missing)
    assert cannot_look_up([record]) == ({record.pk: missing} if missing else {})

    reconcile_record(record.pk)
    attempt = ReconcileAttempt.objects.get(record=record)
    assert attempt.kind == kind
    # What cannot be checked is escalated in the report's words; what can is not.
    assert refresh(record).escalation_reason == missing
