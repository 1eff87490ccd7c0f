"""Which check a look-up worker makes of an unknown call, and what the workers can settle:
``plan_check``, by which ``services.reconcile_record`` picks its check and ``cannot_look_up``
judges a rollback's calls. Registered with the ledger as its look-up check (``apps.py``)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from django.utils.translation import gettext_noop

from ledger.models import IdempotencyRecord, WorkspaceRoot
from ledger.stored_text import StoredText
from reconcile.models import DownstreamAdapter, ReconcileAttempt

#: Why no worker can settle a call; the worker escalates it in the same words.
NO_ADAPTER = StoredText(gettext_noop("%(tool)s has no downstream adapter to look the key up"))
NOT_REGISTERED = StoredText(
    gettext_noop("workspace %(workspace)s is not registered on the workers")
)


@dataclass(frozen=True, slots=True)
class PlannedCheck:
    """The check a worker makes of an unknown call (a ``ReconcileAttempt.Kind``), and why it
    cannot, in the words it escalates the call with (empty when it can)."""

    kind: str
    missing: str = ""


def plan_check(
    record: IdempotencyRecord, *, workspace: str | None, registered: bool, has_adapter: bool
) -> PlannedCheck:
    """The check a worker makes of ``record``: a call with a write plan (``workspace``, that of
    the first plan of the record's entries) is checked against its file, which needs the
    workspace ``registered`` on the workers; any other call is looked up through its tool's
    downstream adapter, if it ``has_adapter``. (Needs ``record.tool`` for the words.)"""
    if workspace is not None:
        why = "" if registered else NOT_REGISTERED(workspace=repr(workspace))
        return PlannedCheck(ReconcileAttempt.Kind.FILE_HASH, why)
    if has_adapter:
        return PlannedCheck(ReconcileAttempt.Kind.DOWNSTREAM)
    return PlannedCheck(ReconcileAttempt.Kind.NONE, NO_ADAPTER(tool=record.tool.name))


def write_plan_workspaces(record_ids: Sequence[int]) -> dict[int, str]:
    """The workspace of each record's own write plan (record id -> workspace), as the worker's
    claim reads the plan (``services._claim``); records without a plan are left out."""
    plans: dict[int, str] = {}
    for record_id, workspace in IdempotencyRecord.write_plans(id__in=record_ids).values_list(
        "entry__record_id", "workspace"
    ):
        plans.setdefault(record_id, workspace)
    return plans


def cannot_look_up(records: Sequence[IdempotencyRecord]) -> dict[int, str]:
    """Why each record no worker can look up needs a human (record id -> reason), in the
    words the worker escalates it with. Three queries, whatever the number of records."""
    plans = write_plan_workspaces([record.pk for record in records])
    with_adapter = set(
        DownstreamAdapter.objects.filter(tool_id__in={r.tool_id for r in records}).values_list(
            "tool_id", flat=True
        )
    )
    registered = {
        (tenant_id, name)
        for tenant_id, name in WorkspaceRoot.objects.filter(
            tenant_id__in={r.tenant_id for r in records}
        ).values_list("tenant_id", "name")
    }
    checks = {
        record.pk: plan_check(
            record,
            workspace=plans.get(record.pk),
            registered=(record.tenant_id, plans.get(record.pk)) in registered,
            has_adapter=record.tool_id in with_adapter,
        )
        for record in records
    }
    return {pk: check.missing for pk, check in checks.items() if check.missing}
