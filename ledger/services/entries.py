"""Ledger entry status changes: the one place that moves an entry between statuses."""

from __future__ import annotations

from typing import Any

from ledger.domain import EntryStatus
from ledger.errors import InvalidTransition
from ledger.models import LedgerEntry


def entry_change(entry: LedgerEntry, to: EntryStatus, **changes: Any) -> dict[str, Any]:
    """The column changes that move ``entry`` to ``to``, if the table allows it."""
    current = EntryStatus(entry.status)
    if to not in LedgerEntry.TRANSITIONS[current]:
        raise InvalidTransition(f"a ledger entry cannot go from {current} to {to}")
    return {**changes, "status": to.value}


def transition_entry(entry: LedgerEntry, to: EntryStatus, **changes: Any) -> None:
    """Move ``entry`` to ``to`` if the table allows it and nobody moved it first."""
    current = entry.status
    changes = entry_change(entry, to, **changes)
    updated = LedgerEntry.objects.filter(pk=entry.pk, status=current).update(**changes)
    if updated != 1:
        raise InvalidTransition(f"ledger entry {entry.call_id} changed status concurrently")
    for field, value in changes.items():
        setattr(entry, field, value)
