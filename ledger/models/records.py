"""Idempotency records: one business action each, and its write plan."""

from __future__ import annotations

from functools import cached_property
from typing import Any, ClassVar

from django.db import models
from django.db.models import Q, QuerySet
from django.db.models.functions import Now

from ledger.decisions import failure_is_final
from ledger.domain import (
    FINAL_ERROR_CODES,
    TERMINAL_RECORD_STATES,
    DataClassification,
    EscalationKind,
    Idempotency,
    RecordState,
    choices,
)
from ledger.models.combinations import Run, VersionCombination
from ledger.models.constraints import SHA256_HEX, one_of
from ledger.models.json_strings import ArrayConcat, JsonStrings, holding_string
from ledger.models.registry import Tool
from ledger.models.tenancy import Tenant

#: The terminal states as the constraints name them, in the states' declared order.
TERMINAL = [state.value for state in RecordState if state in TERMINAL_RECORD_STATES]
#: The records that hold a result or an error: the rows of ``record_values_idx``, whose
#: expression is ``RECORDED_STRINGS``'s (migration 0027).
RECORDED = Q(result__isnull=False) | Q(error__isnull=False)
RECORDED_STRINGS = ArrayConcat(JsonStrings("result"), JsonStrings("error"))


class IdempotencyRecord(models.Model):
    """One business action, keyed by the runtime. See DESIGN section 3 for the state table."""

    #: The allowed state changes: the pairs ``ledger.records.transitions`` declares.
    TRANSITIONS: ClassVar[dict[RecordState, frozenset[RecordState]]] = {
        RecordState.RESERVED: frozenset({RecordState.EXECUTING}),
        RecordState.EXECUTING: frozenset(
            {RecordState.SUCCEEDED, RecordState.FAILED_FINAL, RecordState.UNKNOWN}
        ),
        # Back to executing only by a replay decision (auto tool, or a consumed approval).
        RecordState.UNKNOWN: frozenset(
            {RecordState.SUCCEEDED, RecordState.FAILED_FINAL, RecordState.EXECUTING}
        ),
        # A retryable failure may be replayed under the same key; a final one never. A report
        # from the current holder that it ran after all makes the outcome unknown again.
        RecordState.FAILED_FINAL: frozenset({RecordState.EXECUTING, RecordState.UNKNOWN}),
        RecordState.SUCCEEDED: frozenset(),
    }
    #: The states a record waiting for a human's approval starts from
    #: (``ledger.records.transitions.STARTED``): reserved, or (an approved replay) unknown or
    #: failed, the last only while it failed retryably (``waits_to_start``).
    STARTS_FROM: ClassVar[frozenset[RecordState]] = frozenset(
        {RecordState.RESERVED, RecordState.UNKNOWN, RecordState.FAILED_FINAL}
    )

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="records")
    key = models.CharField(max_length=1024)
    tool = models.ForeignKey(Tool, on_delete=models.PROTECT, related_name="records")
    fingerprint = models.CharField(max_length=64)
    state = models.CharField(max_length=16, choices=choices(RecordState))
    requires_approval = models.BooleanField(default=False)
    result = models.JSONField(null=True, blank=True)
    error = models.JSONField(null=True, blank=True)
    error_retryable = models.BooleanField(default=False)
    lease_owner = models.CharField(max_length=200, blank=True)
    lease_expires_at = models.DateTimeField(null=True, blank=True)
    fencing_token = models.BigIntegerField(default=0)
    ttl_seconds = models.PositiveIntegerField()
    expires_at = models.DateTimeField(null=True, blank=True)
    duplicate_hits = models.PositiveIntegerField(default=0)
    executions = models.PositiveIntegerField(default=0)
    run = models.ForeignKey(Run, null=True, blank=True, on_delete=models.SET_NULL)
    combination = models.ForeignKey(
        VersionCombination, null=True, blank=True, on_delete=models.SET_NULL
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)
    completed_at = models.DateTimeField(null=True, blank=True)
    # The class the action had when it was first reserved (duplicate side-effect metric).
    classified_as = models.CharField(
        max_length=16, choices=choices(Idempotency), default=Idempotency.NON_IDEMPOTENT
    )
    # The data classification of the action's input, declared by the call that reserved it:
    # what is stored of its result, error and evidence, whoever finds the outcome, is redacted
    # by it (``ledger.redaction.redact_for_storage``; DESIGN sections 4 and 10).
    data_classification = models.CharField(
        max_length=16,
        choices=choices(DataClassification),
        default=DataClassification.INTERNAL.value,
        db_default=DataClassification.INTERNAL.value,
    )
    # Reserved by a shadow run: only a read may ever hold such a record (``ledger.shadow``).
    shadow = models.BooleanField(default=False)
    # Executions known to have failed without effect (failed_final from a run or a look-up).
    failed_executions = models.PositiveIntegerField(default=0)
    # Reconciliation of unknown outcomes (see reconcile.services).
    uncertain_since = models.DateTimeField(null=True, blank=True)
    reconcile_attempts = models.PositiveIntegerField(default=0)
    next_reconcile_at = models.DateTimeField(null=True, blank=True)
    reconcile_claimed_until = models.DateTimeField(null=True, blank=True)
    escalated_at = models.DateTimeField(null=True, blank=True)
    escalation_reason = models.TextField(blank=True)
    # Why it was escalated; meaningful while ``escalated_at`` is set
    # (``ledger.records.escalation.escalated_as``).
    escalation_kind = models.CharField(
        max_length=24, blank=True, default="", db_default="", choices=choices(EscalationKind)
    )

    class Meta:
        constraints: ClassVar = [
            models.UniqueConstraint(fields=["tenant", "key"], name="record_unique_key"),
            models.CheckConstraint(
                condition=one_of("state", RecordState), name="record_state_valid"
            ),
            models.CheckConstraint(
                condition=Q(escalation_kind="") | one_of("escalation_kind", EscalationKind),
                name="record_escalation_kind_valid",
            ),
            models.CheckConstraint(
                condition=one_of("data_classification", DataClassification),
                name="record_data_classification_valid",
            ),
            models.CheckConstraint(
                condition=~Q(state=RecordState.EXECUTING)
                | (Q(lease_expires_at__isnull=False) & ~Q(lease_owner="")),
                name="record_executing_has_lease",
            ),
            # Only terminal records expire, so cleanup can never reach one still in flight.
            models.CheckConstraint(
                condition=Q(state__in=TERMINAL, expires_at__isnull=False)
                | (~Q(state__in=TERMINAL) & Q(expires_at__isnull=True)),
                name="record_only_terminal_expires",
            ),
            models.CheckConstraint(
                condition=Q(fingerprint__regex=SHA256_HEX), name="record_fingerprint_sha256"
            ),
            models.CheckConstraint(
                condition=Q(fencing_token__gte=0), name="record_fencing_token_positive"
            ),
            # The ledger's guarantee for shadow runs, in the database: whatever path a request
            # takes, a shadow run never reserves, let alone executes, a side-effecting action.
            models.CheckConstraint(
                condition=Q(shadow=False) | Q(classified_as=Idempotency.IDEMPOTENT),
                name="record_shadow_only_reads",
            ),
        ]
        indexes: ClassVar = [
            models.Index(
                fields=["lease_expires_at"],
                condition=Q(state="executing"),
                name="record_executing_lease_idx",
            ),
            models.Index(
                fields=["expires_at"], condition=Q(state__in=TERMINAL), name="record_expiry_idx"
            ),
            models.Index(
                fields=["tenant", "updated_at"],
                condition=Q(state="unknown"),
                name="record_unknown_idx",
            ),
            # The unknown-outcomes queue, oldest first, without sorting every unknown record.
            models.Index(
                fields=["tenant", "uncertain_since", "id"],
                condition=Q(state="unknown"),
                name="record_unknown_age_idx",
            ),
            models.Index(
                fields=["next_reconcile_at"],
                condition=Q(state="unknown", escalated_at__isnull=True),
                name="record_reconcile_due_idx",
            ),
            # The console's search for an id inside a recorded result or error (a downstream's
            # order id, ``holding_string``) reads record_values_idx, made in SQL by migration
            # 0027 with the function it indexes and the statistics the planner reads of it.
        ]

    def __str__(self) -> str:
        return f"{self.key} ({self.state})"

    @staticmethod
    def holding_string(tenant_id: int, text: str) -> QuerySet[IdempotencyRecord]:
        """The tenant's records whose recorded result or error holds the string ``text`` at
        any depth (an order id a downstream answered with), read from ``record_values_idx``."""
        recorded = IdempotencyRecord.objects.filter(RECORDED)
        return holding_string(recorded, RECORDED_STRINGS, tenant_id, text)

    @property
    def failed_retryably(self) -> bool:
        """Failed without effect and not for good: it may be started again (with a human's
        approval where its policy asks for one). ``decisions.failure_is_final`` decides."""
        return self.state == RecordState.FAILED_FINAL and not failure_is_final(
            error_code=(self.error or {}).get("code"), retryable=self.error_retryable
        )

    @staticmethod
    def failed_retryably_q(path: str = "") -> Q:
        """``failed_retryably`` as a query over the record at ``path`` (``"record__"`` from a
        row that points at one): ``decisions.failure_is_final`` as a condition, for lists read
        in one statement (tests/records/test_record_rules.py holds the two equal)."""
        code = f"{path}error__code"
        return Q(**{f"{path}state": RecordState.FAILED_FINAL, f"{path}error_retryable": True}) & (
            Q(**{f"{path}error__isnull": True})
            | Q(**{f"{code}__isnull": True})
            | ~Q(**{f"{code}__in": sorted(FINAL_ERROR_CODES)})
        )

    @property
    def escalated(self) -> bool:
        """Handed to a human (``ledger.records.escalation.escalate``), for a reason of any
        kind: no longer looked up automatically until an operator asks for a look-up."""
        return self.escalated_at is not None

    @staticmethod
    def escalated_q(path: str = "") -> Q:
        """``escalated`` as a query over the record at ``path``, like ``failed_retryably_q``."""
        return Q(**{f"{path}escalated_at__isnull": False})

    @classmethod
    def awaiting_lookup_q(cls, path: str = "") -> Q:
        """The records a worker may claim for a look-up: unknown, not escalated, and no
        worker's claim still held, by the database's clock. ``records.escalation.claimable_sql``
        is the same rule in SQL, for the claim's own statement."""
        claim = f"{path}reconcile_claimed_until"
        return (
            Q(**{f"{path}state": RecordState.UNKNOWN})
            & ~cls.escalated_q(path)
            & (Q(**{f"{claim}__isnull": True}) | Q(**{f"{claim}__lt": Now()}))
        )

    @property
    def waits_to_start(self) -> bool:
        """Whether an approved start may start it (``STARTS_FROM``): it has not happened, or
        may not have, or it failed without effect and not for good. Running or ended, it does
        not wait."""
        if self.state == RecordState.FAILED_FINAL:
            return self.failed_retryably
        return self.state in self.STARTS_FROM

    @classmethod
    def waits_to_start_q(cls, path: str = "") -> Q:
        """``waits_to_start`` as a query over the record at ``path``, like
        ``failed_retryably_q``."""
        waiting = sorted(cls.STARTS_FROM - {RecordState.FAILED_FINAL})
        return Q(**{f"{path}state__in": waiting}) | cls.failed_retryably_q(path)

    @cached_property
    def write_plan(self) -> WritePlan | None:
        """The action's write plan, wherever it was recorded: retries and duplicates are new
        entries of the same record without a plan of their own. Written with the record's
        first entry or never, so it is read once per instance."""
        return self.write_plans(id=self.pk).first()

    @staticmethod
    def write_plans(**of: Any) -> QuerySet[WritePlan]:
        """The write plans of the records that ``of`` picks by id (``id=``, ``id__in=``, or
        ``id=OuterRef(...)`` in a subquery), each action's own first: the plan of its first
        call that had one. The worker's claim reads the same in SQL
        (``reconcile.services._claim_sql``; ``tests/records/test_record_rules.py`` holds the
        two equal)."""
        picked = {f"entry__record_{lookup}": value for lookup, value in of.items()}
        return WritePlan.objects.filter(**picked).order_by("pk")


class WritePlan(models.Model):
    """A conditional write's plan: replay is decided by the file's hash (DESIGN section 5)."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="write_plans")
    entry = models.OneToOneField("LedgerEntry", on_delete=models.CASCADE, related_name="write_plan")
    workspace = models.CharField(max_length=200)
    path = models.CharField(max_length=1024)
    before_hash = models.CharField(max_length=64)
    after_hash = models.CharField(max_length=64)
    diff = models.TextField(blank=True)
    patch_ref = models.CharField(max_length=200, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints: ClassVar = [
            models.CheckConstraint(
                condition=Q(before_hash__regex=SHA256_HEX) & Q(after_hash__regex=SHA256_HEX),
                name="writeplan_hashes_sha256",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.workspace}:{self.path}"
