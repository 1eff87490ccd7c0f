"""What the look-up workers can settle, judged the way ``services.reconcile_record`` picks
its check: a call with a write plan is checked against its file, which needs the plan's
workspace registered on the workers; any other call is looked up through its tool's
downstream adapter. Registered with the ledger as its look-up check (``apps.py``)."""

from __future__ import annotations

from collections.abc import Sequence

from django.utils.translation import gettext_noop

from ledger.models import IdempotencyRecord, WritePlan
from ledger.stored_text import StoredText
from reconcile.models import DownstreamAdapter, WorkspaceRoot

#: Why no worker can settle a call; the worker escalates it in the same words.
NO_ADAPTER = StoredText(gettext_noop("%(tool)s has no downstream adapter to look the key up"))
NOT_REGISTERED = StoredText(
    gettext_noop("workspace %(workspace)s is not registered on the workers")
)


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
                reasons[record.pk] = NOT_REGISTERED(workspace=repr(planned))
        elif record.tool_id not in with_adapter:
            reasons[record.pk] = NO_ADAPTER(tool=record.tool.name)
    return reasons
