"""Version combinations, the runs made under them, and their rollout plans."""

from __future__ import annotations

import hashlib
from datetime import datetime
from typing import ClassVar

from django.db import models
from django.db.models import Q, QuerySet

from ledger.models.constraints import SHA256_HEX
from ledger.models.tenancy import Tenant


class VersionCombination(models.Model):
    """Model, prompt, rules, tool schema and data version, pinned and rolled back together."""

    class State(models.TextChoices):
        # Created, never run: no run goes to it until it is put in shadow, a canary or active.
        NEW = "new"
        ACTIVE = "active"
        CANARY = "canary"
        # Runs only as shadow runs mirroring live ones: its side-effecting calls never execute.
        SHADOW = "shadow"
        # Fail closed: new runs and calls under it are refused until it is resumed or retired.
        HALTED = "halted"
        # Done with: no new run goes to it; rollback may make it active again.
        RETIRED = "retired"

    #: Every allowed change of state (docs/rollout.md has the table with the action of each).
    #: A halt works from every other state (fail closed); a halted combination only resumes
    #: (to the state it halted from) or is retired; the active one is retired only by the
    #: activation of another.
    TRANSITIONS: ClassVar[dict[str, frozenset[str]]] = {
        State.NEW: frozenset(
            {State.SHADOW, State.CANARY, State.ACTIVE, State.HALTED, State.RETIRED}
        ),
        State.SHADOW: frozenset(
            {State.NEW, State.CANARY, State.ACTIVE, State.HALTED, State.RETIRED}
        ),
        State.CANARY: frozenset({State.SHADOW, State.ACTIVE, State.HALTED, State.RETIRED}),
        State.ACTIVE: frozenset({State.HALTED, State.RETIRED}),
        State.HALTED: frozenset(
            {State.NEW, State.SHADOW, State.CANARY, State.ACTIVE, State.RETIRED}
        ),
        State.RETIRED: frozenset({State.SHADOW, State.CANARY, State.ACTIVE, State.HALTED}),
    }

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="combinations")
    label = models.CharField(max_length=100)
    model = models.CharField(max_length=200)
    prompt = models.CharField(max_length=200)
    rules = models.CharField(max_length=200)
    tool_schema = models.CharField(max_length=200)
    data_version = models.CharField(max_length=200)
    fingerprint = models.CharField(max_length=64)
    state = models.CharField(max_length=16, choices=State.choices, default=State.NEW)
    canary_share_bp = models.PositiveIntegerField(default=0, help_text="Basis points, 0-10000.")
    previous = models.ForeignKey(
        "self",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
        help_text="The combination that was active before this one; rollback restores it.",
    )
    activated_at = models.DateTimeField(null=True, blank=True)
    halted_at = models.DateTimeField(null=True, blank=True)
    halted_reason = models.TextField(blank=True)
    # What a halt stopped, so a resume restores exactly that (a canary at its share, the
    # active one, a combination in shadow at its mirrored share): set while halted.
    halted_from = models.CharField(max_length=16, choices=State.choices, blank=True)
    halted_from_share_bp = models.PositiveIntegerField(default=0)
    # Where a combination in shadow came from, so taking it out returns it there (new, retired
    # or a canary at its share). Kept through a halt and resume of the combination in shadow.
    shadowed_from = models.CharField(max_length=16, choices=State.choices, blank=True)
    shadowed_from_share_bp = models.PositiveIntegerField(default=0)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints: ClassVar = [
            models.UniqueConstraint(fields=["tenant", "fingerprint"], name="combination_unique"),
            models.UniqueConstraint(
                fields=["tenant"], condition=Q(state="active"), name="one_active_combination"
            ),
            models.CheckConstraint(
                condition=Q(canary_share_bp__gte=0, canary_share_bp__lte=10_000),
                name="combination_canary_share_range",
            ),
            models.CheckConstraint(
                condition=Q(fingerprint__regex=SHA256_HEX), name="combination_fingerprint_sha256"
            ),
            # A halted combination knows what to resume to; no other one claims to.
            models.CheckConstraint(
                condition=(Q(state="halted") & ~Q(halted_from__in=["", "halted"]))
                | (~Q(state="halted") & Q(halted_from="", halted_from_share_bp=0)),
                name="combination_halted_from_iff_halted",
            ),
            # A combination in shadow knows where it came from (kept while it is halted).
            models.CheckConstraint(
                condition=(Q(state="shadow") & Q(shadowed_from__in=["new", "retired", "canary"]))
                | (
                    Q(state="halted", halted_from="shadow")
                    & Q(shadowed_from__in=["new", "retired", "canary"])
                )
                | (
                    ~Q(state="shadow")
                    & ~Q(state="halted", halted_from="shadow")
                    & Q(shadowed_from="", shadowed_from_share_bp=0)
                ),
                name="combination_shadowed_from_in_shadow",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.label} ({self.state})"

    @staticmethod
    def compute_fingerprint(
        *, model: str, prompt: str, rules: str, tool_schema: str, data_version: str
    ) -> str:
        joined = "\x1f".join([model, prompt, rules, tool_schema, data_version])
        return hashlib.sha256(joined.encode()).hexdigest()


class Run(models.Model):
    class Status(models.TextChoices):
        RUNNING = "running"
        FINISHED = "finished"
        HALTED = "halted"

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="runs")
    run_id = models.CharField(max_length=200)
    combination = models.ForeignKey(
        VersionCombination, null=True, blank=True, on_delete=models.PROTECT, related_name="runs"
    )
    user_id = models.CharField(max_length=200)
    agent_id = models.CharField(max_length=200, blank=True)
    # Set for a shadow run: the live run it mirrors (``ledger.shadow`` says what it may do).
    shadow_of = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.PROTECT, related_name="shadow_runs"
    )
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.RUNNING)
    termination_reason = models.CharField(max_length=200, blank=True)
    started_at = models.DateTimeField(auto_now_add=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints: ClassVar = [
            models.UniqueConstraint(fields=["tenant", "run_id"], name="run_unique_id"),
            models.CheckConstraint(
                condition=Q(status="running", finished_at__isnull=True)
                | (~Q(status="running") & Q(finished_at__isnull=False)),
                name="run_finished_at_matches_status",
            ),
            models.CheckConstraint(
                condition=~Q(shadow_of=models.F("pk")), name="run_shadow_of_another_run"
            ),
        ]
        indexes: ClassVar = [
            # The console's search by the start of a run id (LIKE 'abc%' in any collation).
            models.Index(
                fields=["run_id"], opclasses=["varchar_pattern_ops"], name="run_id_prefix_idx"
            ),
        ]

    def __str__(self) -> str:
        return self.run_id

    @property
    def halted(self) -> bool:
        """The run may start no more actions: it was halted, or its version combination was.
        ``halted_q`` is the same rule as a query. (Reads ``combination``: select it with the
        run.)"""
        return self.status == Run.Status.HALTED or (
            self.combination is not None
            and self.combination.state == VersionCombination.State.HALTED
        )

    @staticmethod
    def in_flight(combination: VersionCombination) -> QuerySet[Run]:
        """The runs of ``combination`` still running (its tenant's, as the combination is)."""
        return Run.objects.filter(
            tenant_id=combination.tenant_id, combination=combination, status=Run.Status.RUNNING
        )

    @staticmethod
    def halt_in_flight(combination: VersionCombination, *, now: datetime, reason: str) -> int:
        """Halt the runs of ``combination`` still running, ended ``now`` for ``reason``; how
        many (a rollback's, or a halted combination's retirement)."""
        return Run.in_flight(combination).update(
            status=Run.Status.HALTED, finished_at=now, termination_reason=reason
        )

    @staticmethod
    def halted_q(prefix: str = "") -> Q:
        """``halted`` as a query on the runs reached through ``prefix`` (``"entry__run__"``)."""
        return Q(**{f"{prefix}status": Run.Status.HALTED}) | Q(
            **{f"{prefix}combination__state": VersionCombination.State.HALTED}
        )


class RolloutPlan(models.Model):
    """A candidate combination ramped up by steps of traffic share (``combinations.rollouts``)."""

    class State(models.TextChoices):
        RUNNING = "running"
        PAUSED = "paused"
        COMPLETED = "completed"
        HALTED = "halted"
        ABORTED = "aborted"

    OPEN_STATES: ClassVar = [State.RUNNING, State.PAUSED]

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="rollout_plans")
    candidate = models.ForeignKey(
        VersionCombination, on_delete=models.PROTECT, related_name="rollout_plans"
    )
    state = models.CharField(max_length=16, choices=State.choices, default=State.RUNNING)
    current_step = models.PositiveIntegerField(default=0)
    created_by = models.CharField(max_length=200)
    # Why it halted or was aborted.
    reason = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints: ClassVar = [
            # Two plans at once would fight over the canary shares.
            models.UniqueConstraint(
                fields=["tenant"],
                condition=Q(state__in=["running", "paused"]),
                name="one_open_rollout_per_tenant",
            ),
            models.CheckConstraint(
                condition=Q(state__in=["running", "paused"], finished_at__isnull=True)
                | (~Q(state__in=["running", "paused"]) & Q(finished_at__isnull=False)),
                name="rollout_finished_at_matches_state",
            ),
        ]

    def __str__(self) -> str:
        return f"rollout {self.pk} of {self.candidate_id} ({self.state})"


class RolloutStep(models.Model):
    """One step of a plan: a traffic share (0 = shadow) held for a minimum duration and
    sample size, with the analysis of its last evaluation."""

    class State(models.TextChoices):
        PENDING = "pending"
        RUNNING = "running"
        PASSED = "passed"
        SKIPPED = "skipped"
        FAILED = "failed"

    plan = models.ForeignKey(RolloutPlan, on_delete=models.CASCADE, related_name="steps")
    position = models.PositiveIntegerField()
    share_bp = models.PositiveIntegerField(help_text="Basis points of new runs; 0 is shadow.")
    min_minutes = models.PositiveIntegerField(default=0)
    min_samples = models.PositiveIntegerField(
        default=0, help_text="Keyed requests of the candidate during the step."
    )
    state = models.CharField(max_length=16, choices=State.choices, default=State.PENDING)
    started_at = models.DateTimeField(null=True, blank=True)
    ended_at = models.DateTimeField(null=True, blank=True)
    analysis = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering: ClassVar = ["plan", "position"]
        constraints: ClassVar = [
            models.UniqueConstraint(fields=["plan", "position"], name="rollout_step_unique"),
            models.CheckConstraint(
                condition=Q(share_bp__gte=0, share_bp__lte=10_000), name="rollout_step_share"
            ),
        ]

    def __str__(self) -> str:
        return f"step {self.position} ({self.share_bp} bp, {self.state})"
