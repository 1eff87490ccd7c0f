"""The idempotency core: a key reserved, started, kept alive, completed, expired, resolved.

Each state change is declared once in ``transitions`` and run by its one executor, which
audits it in the same statement. ``reserve`` takes a key (``as_seen`` answers a duplicate
without the lock), ``lease`` grants, extends and lapses leases, ``complete`` records a
holder's report, ``resolve`` settles an unknown outcome from evidence, ``escalation`` hands
one to a human, ``write_check`` acts on a write plan's check. Callers read
``records.reserve_key(...)``: the public names are here.
"""

from ledger.records.as_seen import answer_as_seen, count_duplicate_as_seen
from ledger.records.complete import (
    CONTRADICTION_ESCALATION,
    REFUSED_DIFFERENT_RESULT,
    REFUSED_OTHER_CALL,
    REFUSED_SETTLED,
    REFUSED_STALE,
    CompletionRefused,
    complete_execution,
    complete_locked,
    refuse_completion,
    stored_classification,
)
from ledger.records.decision import decide_approval, not_landed
from ledger.records.lease import expire_leases, heartbeat, lease_seconds_granted
from ledger.records.locking import Locked, lock_by_key, lock_record
from ledger.records.reserve import (
    FirstCall,
    Reservation,
    answer_locked,
    executing_record,
    reserve_key,
    reserve_new_key,
    reserve_new_keys,
    start_execution,
)
from ledger.records.resolve import resolve_locked, resolve_unknown
from ledger.records.transitions import Outcome
from ledger.records.write_check import apply_write_check, write_check_evidence

__all__ = [
    "CONTRADICTION_ESCALATION",
    "REFUSED_DIFFERENT_RESULT",
    "REFUSED_OTHER_CALL",
    "REFUSED_SETTLED",
    "REFUSED_STALE",
    "CompletionRefused",
    "FirstCall",
    "Locked",
    "Outcome",
    "Reservation",
    "answer_as_seen",
    "answer_locked",
    "apply_write_check",
    "complete_execution",
    "complete_locked",
    "count_duplicate_as_seen",
    "decide_approval",
    "executing_record",
    "expire_leases",
    "heartbeat",
    "lease_seconds_granted",
    "lock_by_key",
    "lock_record",
    "not_landed",
    "refuse_completion",
    "reserve_key",
    "reserve_new_key",
    "reserve_new_keys",
    "resolve_locked",
    "resolve_unknown",
    "start_execution",
    "stored_classification",
    "write_check_evidence",
]
