"""The call protocol a runtime follows for every tool call (DESIGN sections 3-6).

``record_call`` (``record``) is the hot path: it writes the ledger entry *before* the tool
runs and returns the decision. ``start_call``, ``heartbeat_call`` and ``complete_call``
(``lifecycle``) and ``replay_call`` (``recover``) follow it; ``call_status`` and
``record_by_key`` (``selectors``) look things up; ``observation_for`` (``observe``) is what the
model is told.
"""

from ledger.calls.lifecycle import complete_call, heartbeat_call, start_call
from ledger.calls.observations import observation_for
from ledger.calls.record import record_call
from ledger.calls.recover import replay_call
from ledger.calls.selectors import call_status, record_by_key
from ledger.calls.values import (
    RETRY_AFTER_SECONDS,
    Caller,
    CallInput,
    CallResult,
    Lease,
    WritePlanInput,
)

__all__ = [
    "RETRY_AFTER_SECONDS",
    "CallInput",
    "CallResult",
    "Caller",
    "Lease",
    "WritePlanInput",
    "call_status",
    "complete_call",
    "heartbeat_call",
    "observation_for",
    "record_by_key",
    "record_call",
    "replay_call",
    "start_call",
]
