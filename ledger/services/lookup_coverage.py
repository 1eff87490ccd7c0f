"""Which unknown calls the look-up workers can settle, and why the others need a human.

The workers are the reconcile app's: a call with a write plan is checked against its file under
a registered workspace root, any other call is looked up downstream through its tool's adapter.
What is registered (roots, adapters) is that app's, so it names how to judge a record
(``register_lookup_check``); until it does, no worker is there to look anything up.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from ledger.models import IdempotencyRecord

#: Given unknown records (with their tools), why each one the workers cannot look up cannot be
#: (record id -> reason); a record left out is looked up.
LookupCheck = Callable[[Sequence[IdempotencyRecord]], dict[int, str]]

NO_WORKERS = "no look-up worker is installed"


def _no_workers(records: Sequence[IdempotencyRecord]) -> dict[int, str]:
    return {record.pk: NO_WORKERS for record in records}


_check: LookupCheck = _no_workers


def register_lookup_check(check: LookupCheck) -> None:
    """Name the function that says which records the workers cannot look up."""
    global _check
    _check = check


def cannot_look_up(records: Sequence[IdempotencyRecord]) -> dict[int, str]:
    """Why each of ``records`` that no worker can look up needs a human (record id -> reason)."""
    return _check(records) if records else {}
