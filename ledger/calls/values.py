"""What the call protocol takes and gives: who calls, the call, its lease and the decision."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from ledger.classification import Classification
from ledger.domain import (
    DataClassification,
    Decision,
    Idempotency,
    InputSource,
    ReplayPolicy,
)
from ledger.models import ApiToken, ApprovalRequest, LedgerEntry, Tenant
from ledger.permissions import Scope

RETRY_AFTER_SECONDS = 2


@dataclass(frozen=True, slots=True)
class Caller:
    """Who is calling: the tenant's token, the agent it acts for, the scopes it holds and
    whether its owner is a service account (``ledger.api.auth``). The system (a worker) calls
    with no token."""

    tenant: Tenant
    token: ApiToken | None
    agent_id: str = ""
    scopes: frozenset[Scope] = frozenset()
    service_account: bool = False

    @property
    def identity(self) -> str:
        token = f"token:{self.token.prefix}" if self.token else "system"
        return f"{token}/{self.agent_id}" if self.agent_id else token

    @property
    def user_id(self) -> int | None:
        """The user behind the call: its token's owner."""
        return self.token.user_id if self.token else None


@dataclass(frozen=True, slots=True)
class WritePlanInput:
    workspace: str
    path: str
    before_hash: str
    after_hash: str
    diff: str = ""
    patch_ref: str = ""


@dataclass(frozen=True, slots=True)
class CallInput:
    run_id: str
    step_id: str
    tool: str
    input: dict[str, Any]
    business_object_id: str | None = None
    input_source: InputSource = InputSource.MODEL
    data_classification: DataClassification = DataClassification.INTERNAL
    end_user_id: str = ""
    write_plan: WritePlanInput | None = None


@dataclass(frozen=True, slots=True)
class Lease:
    fencing_token: int
    expires_at: datetime


@dataclass(slots=True)
class CallResult:
    """A decision about one call, with everything the API returns for it."""

    entry: LedgerEntry
    decision: Decision
    classification: Classification
    observation: dict[str, Any] | None = None
    lease: Lease | None = None
    approval: ApprovalRequest | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def http_status(self) -> int:
        if self.decision is Decision.WAIT:
            return 409
        if self.decision is Decision.CONFLICT:
            return 422
        return 200


def entry_classification(entry: LedgerEntry) -> Classification:
    """The classification the call was recorded with."""
    return Classification(
        Idempotency(entry.idempotency),
        ReplayPolicy(entry.replay_policy),
        entry.destructive,
        entry.classification_reason,
        entry.classification_rule,
    )
