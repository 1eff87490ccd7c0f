"""Which unknown calls the look-up workers can settle, and why the others need a human.

The workers are the reconcile app's: a call with a write plan is checked against its file under
a registered workspace root, any other call is looked up downstream through its tool's adapter.
What is registered (adapters) is that app's, so the setting ``LEDGER_LOOKUP_CHECK`` names its
function that judges records (``reconcile.coverage.cannot_look_up``); without one, no worker is
there to look anything up.
"""

from __future__ import annotations

from collections.abc import Sequence

from django.conf import settings
from django.utils.module_loading import import_string

from ledger.models import IdempotencyRecord

NO_WORKERS = "no look-up worker is installed"


def cannot_look_up(records: Sequence[IdempotencyRecord]) -> dict[int, str]:
    """Why each of ``records`` that no worker can look up needs a human (record id -> reason);
    a record left out is looked up."""
    if not records:
        return {}
    name = getattr(settings, "LEDGER_LOOKUP_CHECK", "")
    if not name:
        return {record.pk: NO_WORKERS for record in records}
    found: dict[int, str] = import_string(name)(records)
    return found
