"""Shadow runs: a candidate combination run on mirrored traffic with no side effects.

A shadow run mirrors a live run (``Run.shadow_of``). Its idempotent (``auto``) calls run as
usual: they only read. Every conditional or non-idempotent call is answered
``SHADOW_DRY_RUN``: nothing is reserved and nothing runs; the ledger entry, with the call's
classification, input fingerprint, the key it would have used and its write plan, is the
evidence of the intended action.

The ledger guarantees this, not the runtime: the decision path asks ``dry_run_required`` before
it reserves anything, a follow-up that would start an execution (replay, start after an
approval) of a shadow dry run is refused by ``refuse_follow_up``, and the database refuses a
record of a shadow run for anything but a read (``record_shadow_only_reads``), so no path,
present or future, can hand a shadow run a side-effecting execution.
"""

from __future__ import annotations

from typing import Protocol

from ledger.domain import Decision, Idempotency, KeyScope
from ledger.errors import LedgerError


class _Run(Protocol):
    shadow_of_id: int | None


class ShadowDryRun(LedgerError):
    """A shadow run's side-effecting call cannot be executed, replayed or started."""

    code = "SHADOW_DRY_RUN"
    http_status = 409


def is_shadow(run: _Run) -> bool:
    """Whether the run is a shadow run (it mirrors a live one)."""
    return run.shadow_of_id is not None


def dry_run_required(run: _Run, idempotency: Idempotency) -> bool:
    """Whether a call of this class in this run is answered ``SHADOW_DRY_RUN``: in a shadow
    run, everything that is not idempotent (a conditional write may have an effect too)."""
    return is_shadow(run) and idempotency is not Idempotency.IDEMPOTENT


def key_scope(run: _Run, scope: KeyScope) -> KeyScope:
    """A shadow run's keys are its own (run-scoped): its reads never answer from, replay or
    count against a live run's record, so the candidate's metrics are its own."""
    return KeyScope.RUN if is_shadow(run) else scope


def refuse_follow_up(run: _Run, decision: str) -> None:
    """Refuse a replay or a start of a shadow run's dry run: it was never reserved, and a
    shadow run is never told to execute a side-effecting call, whatever the client sends."""
    if is_shadow(run) and decision == Decision.SHADOW_DRY_RUN:
        raise ShadowDryRun(
            "this call belongs to a shadow run and has side effects: it is never executed"
        )
