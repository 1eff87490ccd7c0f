"""The ledger's data model. Invariants live in the database as named constraints.

State changes are made only by the services in ``ledger.services``; the models hold data and the
allowed-transition tables, never the side effects.
"""

from __future__ import annotations

import hashlib
import secrets
import uuid
from enum import StrEnum
from functools import cached_property
from typing import ClassVar

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.db.models.functions import Now

from ledger.domain import (
    DataClassification,
    Decision,
    EntryStatus,
    EscalationKind,
    Idempotency,
    InputSource,
    KeyScope,
    PerCall,
    RecordState,
    ReplayPolicy,
    ServerTrust,
    choices,
)

TERMINAL = [RecordState.SUCCEEDED.value, RecordState.FAILED_FINAL.value]
SHA256_HEX = r"^[0-9a-f]{64}$"

# The policy must always be the one that goes with the idempotency class.
_POLICY_MATCHES = (
    Q(idempotency=Idempotency.IDEMPOTENT, replay_policy=ReplayPolicy.AUTO)
    | Q(idempotency=Idempotency.CONDITIONAL, replay_policy=ReplayPolicy.ASK)
    | Q(idempotency=Idempotency.NON_IDEMPOTENT, replay_policy=ReplayPolicy.NEVER)
)


def _in(field: str, enum: type[StrEnum]) -> Q:
    return Q(**{f"{field}__in": [member.value for member in enum]})


class Tenant(models.Model):
    slug = models.SlugField(max_length=64, unique=True)
    name = models.CharField(max_length=200)
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return self.slug


class ServiceAccount(models.Model):
    """A user that stands for a runtime, not a person: it owns API tokens, has no password, and
    can never decide an approval (its requests need a human approver)."""

    user = models.OneToOneField(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="service_account"
    )
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="service_accounts")
    name = models.CharField(max_length=100)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints: ClassVar = [
            models.UniqueConstraint(fields=["tenant", "name"], name="serviceaccount_unique_name"),
        ]

    def __str__(self) -> str:
        return f"{self.name} @ {self.tenant_id}"

    @staticmethod
    def username_for(tenant: Tenant, name: str) -> str:
        # "/" is in no tenant slug, so two tenants' accounts never share a user name.
        return f"{tenant.slug}/{name}"

    @classmethod
    def named(cls, *, tenant: Tenant, name: str) -> ServiceAccount:
        """The tenant's service account of this name, created (with its user) if missing."""
        from django.contrib.auth import get_user_model

        existing = cls.objects.filter(tenant=tenant, name=name).select_related("user").first()
        if existing is not None:
            return existing
        username = cls.username_for(tenant, name)
        user_model = get_user_model()
        if len(username) > user_model._meta.get_field("username").max_length:  # type: ignore[operator]
            raise ValueError(f"the service account name {name!r} is too long")
        user = user_model.objects.create_user(username=username, password=None)
        return cls.objects.create(user=user, tenant=tenant, name=name)


class ApiToken(models.Model):
    """A per-tenant bearer token owned by a user: the person who created it, or a service
    account. Only its sha256 is stored; the prefix helps humans find it."""

    PREFIX = "al_"

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="api_tokens")
    # Who stands behind every request made with it: that user can never approve them.
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="api_tokens"
    )
    name = models.CharField(max_length=100)
    prefix = models.CharField(max_length=16)
    token_hash = models.CharField(max_length=64, unique=True)
    created_at = models.DateTimeField(auto_now_add=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints: ClassVar = [
            models.CheckConstraint(
                condition=Q(token_hash__regex=SHA256_HEX), name="apitoken_hash_is_sha256"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.name} ({self.prefix}…)"

    @staticmethod
    def hash(plaintext: str) -> str:
        # Tokens are 256-bit random strings, so a fast hash is enough (no dictionary to attack).
        return hashlib.sha256(plaintext.encode()).hexdigest()

    @classmethod
    def issue(
        cls, *, tenant: Tenant, name: str, user: models.Model | None = None
    ) -> tuple[ApiToken, str]:
        """Create a token owned by ``user``, or by the tenant's service account named after the
        token; the plaintext is returned once and never stored."""
        if user is None:
            user = ServiceAccount.named(tenant=tenant, name=name).user
        plaintext = cls.PREFIX + secrets.token_urlsafe(32)
        token = cls.objects.create(
            tenant=tenant,
            user=user,
            name=name,
            prefix=plaintext[:10],
            token_hash=cls.hash(plaintext),
        )
        return token, plaintext


class McpServer(models.Model):
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="mcp_servers")
    name = models.CharField(max_length=100)
    trust = models.CharField(max_length=16, choices=choices(ServerTrust))
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints: ClassVar = [
            models.UniqueConstraint(fields=["tenant", "name"], name="mcpserver_unique_name"),
            models.CheckConstraint(condition=_in("trust", ServerTrust), name="mcpserver_trust"),
        ]

    def __str__(self) -> str:
        return f"{self.name} ({self.trust})"


class Tool(models.Model):
    """A registry entry with its effective classification, computed by the server."""

    class Kind(models.TextChoices):
        BUILTIN = "builtin"
        CUSTOM = "custom"
        MCP = "mcp"
        SHELL = "shell"

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="tools")
    name = models.CharField(max_length=200)
    kind = models.CharField(max_length=16, choices=Kind.choices)
    server = models.ForeignKey(
        McpServer, null=True, blank=True, on_delete=models.PROTECT, related_name="tools"
    )
    description = models.TextField(blank=True)
    declared_idempotency = models.CharField(
        max_length=16, choices=choices(Idempotency), blank=True, help_text="Blank: undeclared."
    )
    descriptor = models.JSONField(default=dict, blank=True, help_text="As declared, unchanged.")
    output_schema = models.JSONField(null=True, blank=True)
    key_scope = models.CharField(max_length=16, choices=choices(KeyScope), default=KeyScope.RUN)
    # The argument that decides each call's class (SQL, a command, a whole-file write's path).
    per_call_kind = models.CharField(
        max_length=16, choices=choices(PerCall), blank=True, help_text="Blank: the tool's own."
    )
    per_call_argument = models.CharField(max_length=200, blank=True)
    key_fields = models.JSONField(
        default=list,
        blank=True,
        help_text="Argument paths the business object is derived from (e.g. cart.id).",
    )
    # Effective classification (computed, then policy, then override).
    idempotency = models.CharField(max_length=16, choices=choices(Idempotency))
    replay_policy = models.CharField(max_length=8, choices=choices(ReplayPolicy))
    destructive = models.BooleanField(default=False)
    reason = models.TextField()
    rule = models.CharField(max_length=120)
    # A human override, audited by the service that sets it.
    override_idempotency = models.CharField(
        max_length=16, choices=choices(Idempotency), blank=True, help_text="Blank: no override."
    )
    override_destructive = models.BooleanField(default=False)
    override_reason = models.TextField(blank=True)
    overridden_by = models.CharField(max_length=150, blank=True)
    overridden_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints: ClassVar = [
            models.UniqueConstraint(fields=["tenant", "name"], name="tool_unique_name"),
            models.CheckConstraint(condition=_POLICY_MATCHES, name="tool_policy_matches"),
            models.CheckConstraint(
                condition=Q(override_idempotency="") | ~Q(override_reason=""),
                name="tool_override_has_reason",
            ),
            models.CheckConstraint(
                condition=Q(per_call_kind="", per_call_argument="")
                | (~Q(per_call_kind="") & ~Q(per_call_argument="")),
                name="tool_per_call_has_argument",
            ),
            models.CheckConstraint(
                condition=Q(kind="mcp", server__isnull=False)
                | (~Q(kind="mcp") & Q(server__isnull=True)),
                name="tool_mcp_has_server",
            ),
        ]

    def __str__(self) -> str:
        return self.name


class PolicyRule(models.Model):
    """An org policy: tools matching ``pattern`` get this class. Lower priority runs first."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="policy_rules")
    pattern = models.CharField(max_length=200)
    idempotency = models.CharField(max_length=16, choices=choices(Idempotency))
    destructive = models.BooleanField(default=False)
    reason = models.TextField()
    priority = models.IntegerField(default=100)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering: ClassVar = ["priority", "id"]
        constraints: ClassVar = [
            models.UniqueConstraint(fields=["tenant", "pattern"], name="policyrule_unique"),
            models.CheckConstraint(condition=~Q(reason=""), name="policyrule_has_reason"),
        ]

    def __str__(self) -> str:
        return f"{self.pattern} -> {self.idempotency}"


class VersionCombination(models.Model):
    """Model, prompt, rules, tool schema and data version, pinned and rolled back together."""

    class State(models.TextChoices):
        ACTIVE = "active"
        CANARY = "canary"
        # Runs only as shadow runs mirroring live ones: its side-effecting calls never execute.
        SHADOW = "shadow"
        HALTED = "halted"
        RETIRED = "retired"

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="combinations")
    label = models.CharField(max_length=100)
    model = models.CharField(max_length=200)
    prompt = models.CharField(max_length=200)
    rules = models.CharField(max_length=200)
    tool_schema = models.CharField(max_length=200)
    data_version = models.CharField(max_length=200)
    fingerprint = models.CharField(max_length=64)
    state = models.CharField(max_length=16, choices=State.choices, default=State.RETIRED)
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


class IdempotencyRecord(models.Model):
    """One business action, keyed by the runtime. See DESIGN section 3 for the state table."""

    #: The one table of allowed state changes; ``services.records`` enforces it.
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
    # (``ledger.services.escalation.escalated_as``).
    escalation_kind = models.CharField(
        max_length=24, blank=True, default="", db_default="", choices=choices(EscalationKind)
    )

    class Meta:
        constraints: ClassVar = [
            models.UniqueConstraint(fields=["tenant", "key"], name="record_unique_key"),
            models.CheckConstraint(condition=_in("state", RecordState), name="record_state_valid"),
            models.CheckConstraint(
                condition=Q(escalation_kind="") | _in("escalation_kind", EscalationKind),
                name="record_escalation_kind_valid",
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
        ]

    def __str__(self) -> str:
        return f"{self.key} ({self.state})"

    @cached_property
    def write_plan(self) -> WritePlan | None:
        """The action's write plan, wherever it was recorded: retries and duplicates are new
        entries of the same record without a plan of their own. Written with the record's
        first entry or never, so it is read once per instance."""
        return WritePlan.objects.filter(entry__record_id=self.pk).order_by("pk").first()


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
    # True when the key already had a record: a retry or a duplicate (dedup metrics).
    reused_record = models.BooleanField(default=False)
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints: ClassVar = [
            models.CheckConstraint(condition=_in("status", EntryStatus), name="entry_status_valid"),
            models.CheckConstraint(
                condition=_in("decision", Decision), name="entry_decision_valid"
            ),
            models.CheckConstraint(condition=_POLICY_MATCHES, name="entry_policy_matches"),
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
            models.Index(fields=["tenant", "idempotency_key"], name="entry_key_idx"),
            # The console's search (console/explorer.py) also uses two indexes made in SQL by
            # migration 0011: entry_key_trgm_idx (a key by any fragment of it, the business
            # object it ends with, say; pg_trgm, where the server has it) and
            # entry_call_prefix_idx (a call by the start of its id).
        ]

    def __str__(self) -> str:
        return f"{self.call_id} {self.status}"


class WritePlan(models.Model):
    """A conditional write's plan: replay is decided by the file's hash (DESIGN section 5)."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="write_plans")
    entry = models.OneToOneField(LedgerEntry, on_delete=models.CASCADE, related_name="write_plan")
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


class ApprovalRequest(models.Model):
    """A human decision on one action, bound to its action hash and usable once."""

    class State(models.TextChoices):
        PENDING = "pending"
        APPROVED = "approved"
        REJECTED = "rejected"
        CONSUMED = "consumed"
        INVALIDATED = "invalidated"
        EXPIRED = "expired"

    OPEN_STATES: ClassVar = [State.PENDING, State.APPROVED]

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="approvals")
    record = models.ForeignKey(
        IdempotencyRecord, on_delete=models.CASCADE, related_name="approvals"
    )
    entry = models.ForeignKey(LedgerEntry, on_delete=models.CASCADE, related_name="approvals")
    action_hash = models.CharField(max_length=64)
    state = models.CharField(max_length=16, choices=State.choices, default=State.PENDING)
    requested_by = models.CharField(max_length=200)
    # The user behind the request (its token's owner), who can never decide it; none for a
    # request the system made.
    requested_by_user = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="+",
    )
    decided_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.PROTECT
    )
    decision_reason = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    decided_at = models.DateTimeField(null=True, blank=True)
    expires_at = models.DateTimeField()

    class Meta:
        constraints: ClassVar = [
            models.UniqueConstraint(
                fields=["record"],
                condition=Q(state__in=["pending", "approved"]),
                name="one_open_approval_per_record",
            ),
            models.CheckConstraint(
                condition=~Q(state="rejected") | ~Q(decision_reason=""),
                name="approval_rejection_has_reason",
            ),
            models.CheckConstraint(
                condition=Q(action_hash__regex=SHA256_HEX), name="approval_action_hash_sha256"
            ),
        ]

    def __str__(self) -> str:
        return f"approval {self.pk} ({self.state})"

    @property
    def age_seconds(self) -> int:
        from django.utils import timezone

        return int((timezone.now() - self.created_at).total_seconds())


class AuditEvent(models.Model):
    """Append-only: a database trigger rejects UPDATE and DELETE (see migration 0002)."""

    class Outcome(models.TextChoices):
        SUCCESS = "success"
        DENIED = "denied"

    class Source(models.TextChoices):
        API = "api"
        CONSOLE = "console"
        WORKER = "worker"
        SYSTEM = "system"
        CLI = "cli"
        ADMIN = "admin"

    tenant = models.ForeignKey(
        Tenant, null=True, blank=True, on_delete=models.PROTECT, related_name="audit_events"
    )
    actor = models.CharField(max_length=200)
    action = models.CharField(max_length=100)
    target_type = models.CharField(max_length=50)
    target_id = models.CharField(max_length=100)
    before = models.JSONField(null=True, blank=True)
    after = models.JSONField(null=True, blank=True)
    source = models.CharField(max_length=16, choices=Source.choices)
    outcome = models.CharField(max_length=16, choices=Outcome.choices, default=Outcome.SUCCESS)
    detail = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        indexes: ClassVar = [
            models.Index(fields=["tenant", "created_at"], name="audit_tenant_time_idx"),
            # The console's audit log, newest first by id and keyset-paged on it (make bench).
            models.Index(fields=["tenant", "id"], name="audit_tenant_id_idx"),
            models.Index(fields=["target_type", "target_id"], name="audit_target_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.actor} {self.action} {self.target_type}:{self.target_id}"


class MetricBucket(models.Model):
    """Counters per tenant, combination, tool and 5-minute bucket, kept by a periodic rollup
    (``ledger.services.metrics.roll_up``), so dashboards never scan the ledger."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+")
    combination = models.ForeignKey(
        VersionCombination, null=True, blank=True, on_delete=models.CASCADE, related_name="+"
    )
    tool_name = models.CharField(max_length=200)
    bucket_start = models.DateTimeField()
    keyed_requests = models.PositiveIntegerField(default=0)
    dedup_hits = models.PositiveIntegerField(default=0)
    executions = models.PositiveIntegerField(default=0)
    became_uncertain = models.PositiveIntegerField(default=0)
    duplicate_side_effects = models.PositiveIntegerField(default=0)
    decided_execute = models.PositiveIntegerField(default=0)
    decided_recorded_result = models.PositiveIntegerField(default=0)
    decided_wait = models.PositiveIntegerField(default=0)
    decided_approval_required = models.PositiveIntegerField(default=0)
    decided_forbidden = models.PositiveIntegerField(default=0)
    decided_conflict = models.PositiveIntegerField(default=0)
    decided_shadow_dry_run = models.PositiveIntegerField(default=0)

    class Meta:
        constraints: ClassVar = [
            models.UniqueConstraint(
                fields=["tenant", "combination", "tool_name", "bucket_start"],
                name="metric_bucket_unique",
                nulls_distinct=False,
            ),
        ]
        indexes: ClassVar = [
            models.Index(fields=["tenant", "bucket_start"], name="metric_tenant_time_idx"),
            models.Index(fields=["combination", "bucket_start"], name="metric_combo_time_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.tool_name} @ {self.bucket_start}"


class MetricCursor(models.Model):
    """How far the rollup has read an append-only source (entries, audit events)."""

    name = models.CharField(max_length=50, unique=True)
    last_id = models.BigIntegerField(default=0)

    def __str__(self) -> str:
        return f"{self.name}: {self.last_id}"


class Threshold(models.Model):
    """A limit on a metric over a window; crossing it alerts, or halts the combination."""

    class Metric(models.TextChoices):
        DEDUP_HIT_RATE = "dedup_hit_rate"
        UNCERTAIN_RESULTS = "uncertain_results"
        DUPLICATE_SIDE_EFFECTS = "duplicate_side_effects"

    class Action(models.TextChoices):
        ALERT = "alert"
        HALT = "halt"

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="thresholds")
    metric = models.CharField(max_length=32, choices=Metric.choices)
    above = models.FloatField(help_text="Crossed when the metric exceeds this value.")
    window_minutes = models.PositiveIntegerField(default=15)
    min_requests = models.PositiveIntegerField(
        default=20, help_text="Rates are judged only over at least this many keyed requests."
    )
    action = models.CharField(max_length=8, choices=Action.choices, default=Action.ALERT)
    email = models.EmailField(blank=True)
    webhook_url = models.URLField(blank=True)
    enabled = models.BooleanField(default=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints: ClassVar = [
            models.CheckConstraint(
                condition=Q(window_minutes__gte=1, above__gte=0), name="threshold_sane"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.metric} > {self.above} over {self.window_minutes} min -> {self.action}"


class AlertEvent(models.Model):
    """A threshold crossing, with what was done about it."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="alerts")
    threshold = models.ForeignKey(Threshold, on_delete=models.CASCADE, related_name="events")
    combination = models.ForeignKey(
        VersionCombination, on_delete=models.CASCADE, related_name="alerts"
    )
    metric = models.CharField(max_length=32)
    observed = models.FloatField()
    action = models.CharField(max_length=8)
    delivery = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return f"{self.metric}={self.observed} on {self.combination_id}"


class OnCallPolicy(models.Model):
    """How long an approval or an unknown call may wait on a human before people are told: the
    first service level notifies tier 1, the second escalates to tier 2. A tenant without one
    has the defaults."""

    tenant = models.OneToOneField(Tenant, on_delete=models.CASCADE, related_name="on_call")
    first_sla_minutes = models.PositiveIntegerField(default=15)
    second_sla_minutes = models.PositiveIntegerField(default=60)
    expiry_warning_minutes = models.PositiveIntegerField(
        default=10, help_text="An open approval this close to its expiry is announced."
    )
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints: ClassVar = [
            models.CheckConstraint(
                condition=Q(first_sla_minutes__gte=1)
                & Q(second_sla_minutes__gt=models.F("first_sla_minutes"))
                & Q(expiry_warning_minutes__gte=1),
                name="on_call_sla_order",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.tenant_id}: {self.first_sla_minutes}/{self.second_sla_minutes} min"


class NotificationChannel(models.Model):
    """Where one role of one tenant is told about what waits on it, at one escalation tier.
    ``target`` is an e-mail address or a webhook URL, which often carries a token: it is shown
    masked and never logged."""

    class Role(models.TextChoices):
        # The console's roles that act on what a notification announces.
        OPERATOR = "operator"
        APPROVER = "approver"
        MANAGER = "manager"

    class Kind(models.TextChoices):
        EMAIL = "email"
        WEBHOOK = "webhook"  # the generic JSON payload
        SLACK = "slack"  # a Slack-compatible incoming-webhook payload

    tenant = models.ForeignKey(
        Tenant, on_delete=models.CASCADE, related_name="notification_channels"
    )
    role = models.CharField(max_length=16, choices=Role.choices)
    tier = models.PositiveSmallIntegerField(default=1)
    kind = models.CharField(max_length=16, choices=Kind.choices)
    target = models.CharField(max_length=500)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints: ClassVar = [
            models.UniqueConstraint(
                fields=["tenant", "role", "tier", "kind", "target"],
                name="notification_channel_unique",
            ),
            models.CheckConstraint(condition=Q(tier__in=[1, 2]), name="notification_tier_valid"),
            models.CheckConstraint(
                condition=Q(role__in=["operator", "approver", "manager"]),
                name="notification_role_valid",
            ),
            models.CheckConstraint(
                condition=Q(kind__in=["email", "webhook", "slack"]),
                name="notification_kind_valid",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.role} tier {self.tier} {self.kind} {self.masked_target}"

    @property
    def masked_target(self) -> str:
        """The target without its secrets: a webhook's scheme and host, an address's domain."""
        if self.kind == self.Kind.EMAIL:
            return "…@" + self.target.rpartition("@")[2]
        scheme, _, rest = self.target.partition("://")
        return f"{scheme}://{rest.split('/', 1)[0].rpartition('@')[2]}/…"


class Notification(models.Model):
    """One message to one channel about one waiting item. The unique constraint is the rule
    "at most one notification per item and tier": concurrent sweeps insert the same rows and
    all but one insert is a no-op."""

    class Event(models.TextChoices):
        APPROVAL_REQUESTED = "approval_requested"
        UNKNOWN_ESCALATED = "unknown_escalated"
        SLA_EXCEEDED = "sla_exceeded"  # the channel's tier says which service level
        APPROVAL_EXPIRING = "approval_expiring"
        COMBINATION_HALTED = "combination_halted"
        THRESHOLD_CROSSED = "threshold_crossed"

    class Subject(models.TextChoices):
        APPROVAL = "approval"
        RECORD = "record"
        COMBINATION = "combination"
        ALERT = "alert"

    class State(models.TextChoices):
        PENDING = "pending"
        SENDING = "sending"
        DELIVERED = "delivered"
        FAILED = "failed"

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="notifications")
    channel = models.ForeignKey(
        NotificationChannel, on_delete=models.CASCADE, related_name="notifications"
    )
    event = models.CharField(max_length=32, choices=Event.choices)
    subject_type = models.CharField(max_length=16, choices=Subject.choices)
    subject_id = models.BigIntegerField()
    state = models.CharField(max_length=16, choices=State.choices, default=State.PENDING)
    attempts = models.PositiveIntegerField(default=0)
    # Both by the database's clock (one clock): set in the statements that claim and retry.
    next_attempt_at = models.DateTimeField(db_default=Now())
    claimed_until = models.DateTimeField(null=True, blank=True)
    last_error = models.CharField(max_length=300, blank=True)
    created_at = models.DateTimeField(db_default=Now())
    delivered_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints: ClassVar = [
            models.UniqueConstraint(
                fields=["channel", "event", "subject_type", "subject_id"],
                name="notification_once_per_item_and_tier",
            ),
            models.CheckConstraint(
                condition=Q(state__in=["pending", "sending", "delivered", "failed"]),
                name="notification_state_valid",
            ),
        ]
        indexes: ClassVar = [
            models.Index(
                fields=["next_attempt_at"],
                condition=Q(state__in=["pending", "sending"]),
                name="notification_due_idx",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.event} {self.subject_type}:{self.subject_id} -> {self.channel_id}"


class DeclaredCompensation(models.Model):
    """How an action is undone (docs/compensation.md): the compensating tool and where each of
    its arguments comes from in the original call (``ledger.compensation``). Declared for a
    tool, or by the runtime for one call before it runs (that one wins)."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+")
    tool = models.OneToOneField(
        Tool, null=True, blank=True, on_delete=models.CASCADE, related_name="compensation"
    )
    record = models.OneToOneField(
        IdempotencyRecord,
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="declared_compensation",
    )
    compensating_tool = models.ForeignKey(Tool, on_delete=models.PROTECT, related_name="+")
    arguments = models.JSONField(help_text='e.g. {"order_id": "result.id"}')
    declared_by = models.CharField(max_length=200)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints: ClassVar = [
            models.CheckConstraint(
                condition=Q(tool__isnull=False, record__isnull=True)
                | Q(tool__isnull=True, record__isnull=False),
                name="declaredcompensation_for_tool_or_call",
            ),
        ]

    def __str__(self) -> str:
        return f"-> {self.compensating_tool_id} {self.arguments}"


class Compensation(models.Model):
    """The compensation requested for one succeeded action. It runs as a record of its own,
    whose key is ``key`` (the original's with ``ledger.compensation.KEY_SUFFIX``); ``tool``,
    ``arguments`` and ``url`` are the exact call that was previewed."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+")
    original = models.OneToOneField(
        IdempotencyRecord, on_delete=models.CASCADE, related_name="compensation"
    )
    key = models.CharField(max_length=1024)
    tool = models.ForeignKey(Tool, on_delete=models.PROTECT, related_name="+")
    arguments = models.JSONField()
    url = models.CharField(max_length=2000)
    # The original's run: a run is compensated as a whole through it (a saga).
    run = models.ForeignKey(
        Run, null=True, blank=True, on_delete=models.PROTECT, related_name="compensations"
    )
    requested_by = models.CharField(max_length=200)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints: ClassVar = [
            models.UniqueConstraint(fields=["tenant", "key"], name="compensation_unique_key"),
        ]

    def __str__(self) -> str:
        return self.key


class RolloutPlan(models.Model):
    """A candidate combination ramped up by steps of traffic share (``services.rollouts``)."""

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
