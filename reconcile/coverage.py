"""What the look-up workers can settle, judged the way ``services.reconcile_record`` picks
its check: a call with a write plan is checked against its file, which needs the plan's
workspace registered on the workers; any other call is looked up through its tool's
downstream adapter. Registered with the ledger as its look-up check (``apps.py``)."""

from __future__ import annotations

from collections.abc import Sequence

from ledger.models import IdempotencyRecord, WritePlan
from reconcile.models import DownstreamAdapter, WorkspaceRoot


def cannot_look_up(records: Sequence[IdempotencyRecord]) -> dict[int, str]:
    """Why each record no worker can look up needs a human (record id -> reason), in the
    words the worker escalates it with. Three queries, whatever the number of records."""
    ids = [record.pk for record in records]
    # The worker reads the first write plan of the record's entries (``services._claim``).
    plans: dict[int, str] = {}
    for record_id, workspace in (
        WritePlan.objects.filter(entry__record_id__in=ids)
        .order_by("-pk")
        .values_list("entry__record_id", "workspace")
    ):
        plans[record_id] = workspace
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
    reasons = {}
    for record in records:
        planned = plans.get(record.pk)
        if planned is not None:
            if (record.tenant_id, planned) not in registered:
                reasons[record.pk] = f"workspace {planned!r} is not registered on the workers"
        elif record.tool_id not in with_adapter:
            reasons[record.pk] = f"{record.tool.name} has no downstream adapter to look the key up"
    return reasons
