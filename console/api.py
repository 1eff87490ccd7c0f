"""The JSON API at /api/v1/ (docs/api.md): the one place that mounts every router, the ledger's
and the reconcile app's compensation endpoints."""

from __future__ import annotations

from ledger.api import LedgerAPI, approvals, calls, combinations, rollouts, runs, tools
from reconcile import api as compensations

api = LedgerAPI()
api.add_router("/tools", tools.router)
api.add_router("/runs", runs.router)
api.add_router("/calls", calls.router)
api.add_router("/records", calls.records_router)
api.add_router("/combinations", combinations.router)
api.add_router("/metrics", combinations.metrics_router)
api.add_router("/thresholds", combinations.thresholds_router)
api.add_router("/rollouts", rollouts.router)
api.add_router("/approvals", approvals.router)
api.add_router("/approval-policies", approvals.policies_router)
api.add_router("/compensations", compensations.router)
