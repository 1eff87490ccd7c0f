"""Idempotency-Key semantics in a service's own transaction, and the look-up Agent Ledger reads.

The core (this package's ``protocol``) needs nothing; ``agent_ledger_downstream.django`` needs
the ``django`` extra and ``agent_ledger_downstream.asgi`` the ``fastapi`` extra.
"""

from agent_ledger_downstream.protocol import (
    HEADER,
    REPLAYED_HEADER,
    Problem,
    ReplayDecision,
    StoredResponse,
    decide,
    fingerprint,
    parse_key,
)

__version__ = "0.1.0"

__all__ = [
    "HEADER",
    "REPLAYED_HEADER",
    "Problem",
    "ReplayDecision",
    "StoredResponse",
    "__version__",
    "decide",
    "fingerprint",
    "parse_key",
]
