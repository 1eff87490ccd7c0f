"""The ledger's data model. Invariants live in the database as named constraints.

State changes are made only by the services in ``ledger.services``; the models hold data and the
allowed-transition tables, never the side effects. One module per responsibility; every model is
importable from here.
"""

from ledger.models.approvals import ApprovalPolicy, ApprovalRequest
from ledger.models.audit import AuditEvent
from ledger.models.combinations import RolloutPlan, RolloutStep, Run, VersionCombination
from ledger.models.compensations import Compensation, DeclaredCompensation
from ledger.models.entries import LedgerEntry
from ledger.models.metrics import (
    AlertEvent,
    MetricBucket,
    MetricCursor,
    ReconcileBucket,
    Threshold,
)
from ledger.models.notifications import Notification, NotificationChannel, OnCallPolicy
from ledger.models.records import IdempotencyRecord, WritePlan
from ledger.models.registry import McpServer, PolicyRule, Tool, WorkspaceRoot
from ledger.models.tenancy import ApiToken, Membership, ServiceAccount, Tenant

__all__ = [
    "AlertEvent",
    "ApiToken",
    "ApprovalPolicy",
    "ApprovalRequest",
    "AuditEvent",
    "Compensation",
    "DeclaredCompensation",
    "IdempotencyRecord",
    "LedgerEntry",
    "McpServer",
    "Membership",
    "MetricBucket",
    "MetricCursor",
    "Notification",
    "NotificationChannel",
    "OnCallPolicy",
    "PolicyRule",
    "ReconcileBucket",
    "RolloutPlan",
    "RolloutStep",
    "Run",
    "ServiceAccount",
    "Tenant",
    "Threshold",
    "Tool",
    "VersionCombination",
    "WorkspaceRoot",
    "WritePlan",
]
