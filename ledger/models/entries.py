"""Ledger entries: one tool-call attempt each, written before the call runs."""

from __future__ import annotations

import uuid
from typing import ClassVar

from django.db import models
from django.db.models import Q, QuerySet

from ledger.domain import (
    DataClassification,
    Decision,
    EntryStatus,
    Idempotency,
    InputSource,
    ReplayPolicy,
    choices,
)
from ledger.models.combinations import Run, VersionCombination
from ledger.models.constraints import POLICY_MATCHES, SHA256_HEX, one_of
from ledger.models.json_strings import JsonStrings, holding_string
from ledger.models.records import IdempotencyRecord
from ledger.models.registry import Tool
from ledger.models.tenancy import ApiToken, Tenant

#: The calls whose report gave evidence (``records.complete``): the rows of
#: ``entry_evidence_values_idx``, whose expression is ``EVIDENCE_STRINGS``'s (migration 0027).
HAS_EVIDENCE = ~Q(side_effects=[])
EVIDENCE_STRINGS = JsonStrings("side_effects")

#: The decisions that are not a dedup hit even when the key already had a record: the request
#: executed (a replay), was refused as a different request under the same key (a conflict), or
#: reserved nothing (a shadow run's dry run).
NOT_ANSWERED_FROM_RECORD = frozenset(
    {Decision.EXECUTE.value, Decision.CONFLICT.value, Decision.SHADOW_DRY_RUN.value}
)


class LedgerEntry(models.Model):
    """One tool-call attempt, written before the call runs (seed 000's ``ToolLedgerEntry``)."""

    TRANSITIONS: ClassVar[dict[EntryStatus, frozenset[EntryStatus]]] = {
        EntryStatus.PLANNED: frozenset(
            {EntryStatus.APPROVED, EntryStatus.STARTED, EntryStatus.FAILED}
        ),
        EntryStatus.APPROVED: frozenset({EntryStatus.STARTED, EntryStatus.FAILED}),
        EntryStatus.STARTED: frozenset(
            {EntryStatus.SUCCEEDED, EntryStatus.FAILED, EntryStatus.UNCERTAIN}
        ),
        EntryStatus.UNCERTAIN: frozenset({EntryStatus.SUCCEEDED, EntryStatus.FAILED}),
        EntryStatus.SUCCEEDED: frozenset(),
        # Settled as not executed, then its executor reported it ran: uncertain again.
        EntryStatus.FAILED: frozenset({EntryStatus.UNCERTAIN}),
    }

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="entries")
    call_id = models.UUIDField(default=uuid.uuid4, unique=True, editable=False)
    step_id = models.CharField(max_length=200)
    run = models.ForeignKey(Run, on_delete=models.PROTECT, related_name="entries")
    tool = models.ForeignKey(Tool, on_delete=models.PROTECT, related_name="entries")
    input_hash = models.CharField(max_length=64)
    input = models.JSONField(help_text="Redacted according to the data classification.")
    status = models.CharField(max_length=16, choices=choices(EntryStatus))
    idempotency = models.CharField(max_length=16, choices=choices(Idempotency))
    replay_policy = models.CharField(max_length=8, choices=choices(ReplayPolicy))
    destructive = models.BooleanField(default=False)
    classification_reason = models.TextField()
    classification_rule = models.CharField(max_length=120)
    idempotency_key = models.CharField(max_length=1024, blank=True)
    record = models.ForeignKey(
        IdempotencyRecord,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="entries",
    )
    decision = models.CharField(max_length=24, choices=choices(Decision))
    observation_code = models.CharField(max_length=40, blank=True)
    # What the model was told with the decision (``ledger.calls.observation_for``), kept as
    # given: its record may settle later and the call's page shows what the model got. Null
    # for a call told to go ahead (``execute``), which gets no observation.
    observation = models.JSONField(null=True, blank=True)
    side_effects = models.JSONField(default=list, blank=True)
    input_source = models.CharField(max_length=16, choices=choices(InputSource))
    caller_token = models.ForeignKey(ApiToken, null=True, blank=True, on_delete=models.SET_NULL)
    agent_id = models.CharField(max_length=200, blank=True)
    end_user_id = models.CharField(max_length=200, blank=True)
    data_classification = models.CharField(max_length=16, choices=choices(DataClassification))
    combination = models.ForeignKey(
        VersionCombination, null=True, blank=True, on_delete=models.SET_NULL
    )
    fencing_token = models.BigIntegerField(null=True, blank=True)
    # True when the key already had a record: a retry or a duplicate; a dedup hit unless it
    # executed or conflicted (``DEDUP_HIT``).
    reused_record = models.BooleanField(default=False)
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    #: A dedup hit (DESIGN section 9): a keyed request answered from an existing record, so no
    #: second side effect could start. The one definition, as a filter for querysets (the
    #: metric's rollup, ``ledger.services.metrics``, counts with it, the console's counts too)
    #: and as ``dedup_hit`` for one entry (the console's badges, the CSV); the two are held
    #: equal for every decision by ``tests/test_dedup_hits.py``.
    DEDUP_HIT: ClassVar[Q] = (
        Q(reused_record=True) & ~Q(idempotency_key="") & ~Q(decision__in=NOT_ANSWERED_FROM_RECORD)
    )

    class Meta:
        verbose_name_plural = "ledger entries"
        constraints: ClassVar = [
            models.CheckConstraint(
                condition=one_of("status", EntryStatus), name="entry_status_valid"
            ),
            models.CheckConstraint(
                condition=one_of("decision", Decision), name="entry_decision_valid"
            ),
            models.CheckConstraint(condition=POLICY_MATCHES, name="entry_policy_matches"),
            models.CheckConstraint(
                condition=Q(input_hash__regex=SHA256_HEX), name="entry_input_hash_sha256"
            ),
            models.CheckConstraint(
                condition=~Q(decision=Decision.SHADOW_DRY_RUN) | Q(record__isnull=True),
                name="entry_shadow_dry_run_reserves_nothing",
            ),
        ]
        indexes: ClassVar = [
            # A run's timeline in order (created_at, id): the id makes the order total, so a
            # LIMIT stops at the first rows instead of sorting the whole run (make bench).
            models.Index(fields=["run", "created_at", "id"], name="entry_run_time_idx"),
            # The console's list of calls, newest first by (created_at, id), a time window
            # read from the index in order (console/explorer.py; make bench).
            models.Index(fields=["tenant", "created_at", "id"], name="entry_tenant_time_id_idx"),
            # A tenant's key by its start (LIKE 'agent:...%', the console's search) as well as
            # whole: the pattern class compares byte by byte, what LIKE needs in any collation.
            models.Index(
                fields=["tenant", "idempotency_key"],
                name="entry_key_prefix_idx",
                opclasses=["int8_ops", "varchar_pattern_ops"],
            ),
            # The console's search (console/explorer.py) also uses two indexes made in SQL by
            # migration 0013: entry_key_trgm_idx (a key by any fragment of it, the business
            # object it ends with, say; pg_trgm, where the server has it) and
            # entry_call_prefix_idx (a call by the start of its id).
            # And an id inside the evidence a call's report gave (``holding_string``):
            # entry_evidence_values_idx, made in SQL by migration 0027 like record_values_idx,
            # of the few calls that gave any.
        ]

    def __str__(self) -> str:
        return f"{self.call_id} {self.status}"

    @staticmethod
    def holding_string(tenant_id: int, text: str) -> QuerySet[LedgerEntry]:
        """The tenant's calls whose report's evidence holds the string ``text`` at any depth,
        read from ``entry_evidence_values_idx``."""
        reported = LedgerEntry.objects.filter(HAS_EVIDENCE)
        return holding_string(reported, EVIDENCE_STRINGS, tenant_id, text)

    @property
    def dedup_hit(self) -> bool:
        """Whether this call is a dedup hit (``DEDUP_HIT``)."""
        return (
            self.reused_record
            and self.idempotency_key != ""
            and self.decision not in NOT_ANSWERED_FROM_RECORD
        )
