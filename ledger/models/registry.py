"""The tool registry: MCP servers, tools with their classification, policy rules and the
workspace roots the workers may read."""

from __future__ import annotations

from typing import ClassVar

from django.db import models
from django.db.models import Q

from ledger.domain import Idempotency, KeyScope, PerCall, ReplayPolicy, ServerTrust, choices
from ledger.models.constraints import POLICY_MATCHES, one_of
from ledger.models.tenancy import Tenant


class McpServer(models.Model):
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="mcp_servers")
    name = models.CharField(max_length=100)
    trust = models.CharField(max_length=16, choices=choices(ServerTrust))
    #: The name the server gave itself when it answered ``initialize`` (``serverInfo.name``):
    #: the reads of a reference server the ledger knows (``classification.mcp_servers``).
    implementation = models.CharField(max_length=200, blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints: ClassVar = [
            models.UniqueConstraint(fields=["tenant", "name"], name="mcpserver_unique_name"),
            models.CheckConstraint(condition=one_of("trust", ServerTrust), name="mcpserver_trust"),
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
            models.CheckConstraint(condition=POLICY_MATCHES, name="tool_policy_matches"),
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


class WorkspaceRoot(models.Model):
    """A directory the workers may read to check conditional writes (never outside it). The
    classifier is handed the tenant's roots: a whole-file write under one is replayable after a
    hash check (``classification.files``)."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="workspaces")
    name = models.CharField(max_length=200, help_text="The write plan's ``workspace``.")
    path = models.CharField(max_length=1024, help_text="Absolute path on the worker machines.")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints: ClassVar = [
            models.UniqueConstraint(fields=["tenant", "name"], name="workspace_unique_name"),
            models.CheckConstraint(
                condition=Q(path__startswith="/"), name="workspace_path_absolute"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.name} -> {self.path}"

    @staticmethod
    def paths_for(tool: Tool) -> list[str]:
        """The roots the classifier is handed for a call of ``tool``: the paths of its tenant's
        roots for a whole-file write (its path is checked against them), none otherwise (no
        query)."""
        if tool.per_call_kind != PerCall.FILE_WRITE:
            return []
        return list(
            WorkspaceRoot.objects.filter(tenant_id=tool.tenant_id).values_list("path", flat=True)
        )
