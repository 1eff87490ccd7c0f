"""The tool registry: register tools, import MCP servers' tools, override, apply policy.

The stored classification is always recomputed here from the declared descriptor, the tenant's
policy rules and the human override, so it can never drift from the rules that produce it.
"""

from __future__ import annotations

import re
from functools import partial
from typing import Any

from django.db import IntegrityError, transaction

from ledger.classification import Classification
from ledger.classification.arguments import DecidingArgument, deciding_argument
from ledger.classification.catalogue import SHELL_TOOLS, catalogue_tool
from ledger.classification.mcp import validate_descriptor
from ledger.classification.policy import (
    Override,
    PolicyRule,
    base_classification,
    effective_classification,
)
from ledger.classification.words import catalogue_namespace
from ledger.clock import db_now
from ledger.domain import Idempotency, KeyScope, PerCall, ServerTrust
from ledger.errors import Conflict, InvalidInput, NotFound
from ledger.keys import KeyBuildError, key_field_outside_schema, validate_key_fields
from ledger.models import McpServer, Tenant, Tool
from ledger.models import PolicyRule as PolicyRuleRow
from ledger.redaction import redact_text
from ledger.services.audit import audit

TOOL_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:/@+-]{0,199}$")
SERVER_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$")
MAX_IMPORTED_TOOLS = 500
IMPLEMENTATION_MAX = 200


def validate_tool_name(name: Any) -> str:
    """A registry name: letters, digits and ``_ . : / @ + -``; no markup, no control characters."""
    if not isinstance(name, str) or not TOOL_NAME.match(name):
        raise InvalidInput(
            f"tool name {name!r} is not allowed: use 1-200 letters, digits or _ . : / @ + -"
        )
    return name


def _rules(tenant: Tenant) -> list[PolicyRule]:
    return [
        PolicyRule(r.pattern, Idempotency(r.idempotency), r.destructive, r.reason, str(r.pk))
        for r in PolicyRuleRow.objects.filter(tenant=tenant)
    ]


def _override(tool: Tool) -> Override | None:
    if not tool.override_idempotency:
        return None
    return Override(
        Idempotency(tool.override_idempotency),
        tool.override_destructive,
        tool.override_reason,
        tool.overridden_by,
    )


def _server_namespace(server_id: int | None) -> str:
    """The name prefix all tools of an MCP server share (see ``catalogue_namespace``)."""
    if server_id is None:
        return ""
    names = Tool.objects.filter(server_id=server_id).values_list("descriptor__name", flat=True)
    return catalogue_namespace([str(name) for name in names])


def _classify(tool: Tool, rules: list[PolicyRule], namespace: str | None = None) -> Classification:
    is_mcp = tool.kind == Tool.Kind.MCP
    base = base_classification(
        tool_name=tool.name,
        declared=Idempotency(tool.declared_idempotency) if tool.declared_idempotency else None,
        mcp_descriptor=tool.descriptor if is_mcp else None,
        trust=ServerTrust(tool.server.trust) if tool.server else None,
        namespace=(_server_namespace(tool.server_id) if namespace is None else namespace)
        if is_mcp
        else "",
        implementation=tool.server.implementation if is_mcp and tool.server else "",
        code_argument=DecidingArgument(PerCall(tool.per_call_kind), tool.per_call_argument)
        if tool.per_call_kind and not is_mcp
        else None,
        description=tool.description,
    )
    return effective_classification(
        base, tool_name=tool.name, rules=rules, override=_override(tool)
    )


def _apply(tool: Tool, classification: Classification) -> None:
    tool.idempotency = classification.idempotency.value
    tool.replay_policy = classification.replay_policy.value
    tool.destructive = classification.destructive
    tool.reason = classification.reason
    tool.rule = classification.rule


def _snapshot(tool: Tool) -> dict[str, Any]:
    return {
        "idempotency": tool.idempotency,
        "replay_policy": tool.replay_policy,
        "destructive": tool.destructive,
        "rule": tool.rule,
        "per_call": f"{tool.per_call_kind}:{tool.per_call_argument}" if tool.per_call_kind else "",
        "key_fields": list(tool.key_fields or []),
        "key_scope": tool.key_scope,
    }


def _classification(snapshot: dict[str, Any]) -> dict[str, Any]:
    """A tool's snapshot without its key fields, which are declared, not classified."""
    return {k: v for k, v in snapshot.items() if k not in ("key_fields", "key_scope")}


def _key_fields(paths: list[str], input_schema: Any = None) -> list[str]:
    """The key fields as declared, refused when malformed or, for a tool whose input schema is
    known (an MCP tool's ``inputSchema``), when one names an argument the tool does not take."""
    try:
        declared = validate_key_fields(paths)
    except KeyBuildError as exc:
        raise InvalidInput(str(exc)) from None
    outside = key_field_outside_schema(declared, input_schema)
    if outside is not None:
        raise InvalidInput(f"key field {outside!r} names no argument of the tool's input schema")
    return declared


def _default_scope(tool: Tool, key_scope: KeyScope | None) -> str:
    """A tool's key scope: the one declared, else ``business`` for a non-idempotent tool
    with key fields (its key names the business object alone, so a re-planned call in a new
    run cannot run it again), else the catalogue's or ``run``."""
    if key_scope is None and tool.key_fields and tool.idempotency == Idempotency.NON_IDEMPOTENT:
        key_scope = KeyScope.BUSINESS
    known = catalogue_tool(tool.name)
    return (key_scope or (known.key_scope if known else KeyScope.RUN)).value


def declare_key_fields(
    *,
    tenant: Tenant,
    name: str,
    key_fields: list[str],
    key_scope: KeyScope | None,
    actor: str,
    source: str,
) -> Tool:
    """Declare what identifies a tool's business action, for any tool (an MCP server's
    included), audited; its classification is not touched."""
    with transaction.atomic():
        tool = Tool.objects.select_for_update(no_key=True).filter(tenant=tenant, name=name).first()
        if tool is None:
            raise NotFound(f"no tool {name!r}")
        before = _snapshot(tool)
        tool.key_fields = _key_fields(key_fields, (tool.descriptor or {}).get("inputSchema"))
        tool.key_scope = _default_scope(tool, key_scope)
        tool.save(update_fields=["key_fields", "key_scope"])
        audit(
            tenant=tenant,
            actor=actor,
            action="tool.key_fields_declared",
            target=tool,
            source=source,
            before=before,
            after=_snapshot(tool),
        )
    return tool


def _kind(name: str) -> str:
    if name in SHELL_TOOLS:
        return Tool.Kind.SHELL
    if catalogue_tool(name) is not None:
        return Tool.Kind.BUILTIN
    return Tool.Kind.CUSTOM


def register_tool(
    *,
    tenant: Tenant,
    name: str,
    actor: str,
    source: str,
    declared_idempotency: Idempotency | None = None,
    description: str = "",
    output_schema: dict[str, Any] | None = None,
    key_scope: KeyScope | None = None,
    code_argument: DecidingArgument | None = None,
    key_fields: list[str] | None = None,
) -> Tool:
    """Create or update a tool declared by the tenant's runtime, and classify it. The row is
    locked ``FOR NO KEY UPDATE``: calls in flight keep checking their foreign key to it
    (``FOR KEY SHARE``) instead of queueing behind the declaration. ``code_argument`` says
    which argument carries SQL, a command or code: each call is then classified from it."""
    validate_tool_name(name)
    if code_argument is not None and code_argument.kind is PerCall.FILE_WRITE:
        raise InvalidInput("a registered hint names an argument that carries code")
    if code_argument is not None and not code_argument.name.strip():
        raise InvalidInput("a code argument needs the argument's name")
    attempt = partial(
        _register_tool,
        tenant,
        name,
        actor,
        source,
        declared_idempotency,
        description,
        output_schema,
        key_scope,
        code_argument,
        key_fields or [],
    )
    try:
        return attempt()
    except IntegrityError:
        # A new name inserted by a concurrent declaration or first use since the look-up:
        # the row is committed now (the insert waited for it), so this is an update.
        if not Tool.objects.filter(tenant=tenant, name=name).exists():
            raise
        return attempt()


def _register_tool(
    tenant: Tenant,
    name: str,
    actor: str,
    source: str,
    declared_idempotency: Idempotency | None,
    description: str,
    output_schema: dict[str, Any] | None,
    key_scope: KeyScope | None,
    code_argument: DecidingArgument | None,
    key_fields: list[str],
) -> Tool:
    with transaction.atomic():
        tool = Tool.objects.select_for_update(no_key=True).filter(tenant=tenant, name=name).first()
        created = tool is None
        if tool is None:
            tool = Tool(tenant=tenant, name=name)
        elif tool.kind == Tool.Kind.MCP:
            raise InvalidInput(f"{name!r} was imported from an MCP server; re-import it instead")
        before = None if created else _snapshot(tool)
        tool.per_call_kind = code_argument.kind.value if code_argument else ""
        tool.per_call_argument = code_argument.name if code_argument else ""
        _declare(
            tool, tenant, declared_idempotency, description, output_schema, key_scope, key_fields
        )
        tool.save()
        audit(
            tenant=tenant,
            actor=actor,
            action="tool.registered" if created else "tool.updated",
            target=tool,
            source=source,
            before=before,
            after=_snapshot(tool),
        )
    return tool


def _declare(
    tool: Tool,
    tenant: Tenant,
    declared_idempotency: Idempotency | None = None,
    description: str = "",
    output_schema: dict[str, Any] | None = None,
    key_scope: KeyScope | None = None,
    key_fields: list[str] | None = None,
) -> None:
    """Set what the runtime declares about ``tool`` (unsaved), and classify it.

    A non-idempotent tool with key fields defaults to the ``business`` scope: its key names the
    business object alone, so a re-planned call (a new step, a new run) cannot run it again.
    """
    known = catalogue_tool(tool.name)
    tool.kind = _kind(tool.name)
    tool.declared_idempotency = declared_idempotency.value if declared_idempotency else ""
    tool.description = description or (known.description if known else "")
    tool.output_schema = output_schema
    tool.key_fields = _key_fields(key_fields or [])
    tool.descriptor = {
        "name": tool.name,
        "idempotency": tool.declared_idempotency or None,
        "description": description,
    }
    _apply(tool, _classify(tool, _rules(tenant)))
    tool.key_scope = _default_scope(tool, key_scope)


def ensure_catalogue_tool(*, tenant: Tenant, name: str, actor: str, source: str) -> Tool:
    """The registry row of a catalogue or shell tool, registered on first use.

    Agents often use a tool for the first time all at once. The row is only ever inserted
    here, never locked or updated: when another first use inserted it first, the insert waits
    for that one to commit, fails, and the row it committed is used. (Going through
    ``register_tool``, the losers got an IntegrityError, and one that found the row committed
    locked it ``FOR UPDATE``, deadlocking against calls that held their record's lock and were
    checking the tool's foreign key.)"""
    tool = Tool.objects.filter(tenant=tenant, name=name).first()
    if tool is not None:
        return tool
    if not is_builtin(name):
        raise NotFound(f"unknown tool {name!r}: register it first")
    tool = Tool(tenant=tenant, name=name)
    _declare(tool, tenant)
    try:
        with transaction.atomic():
            tool.save(force_insert=True)
            audit(
                tenant=tenant,
                actor=actor,
                action="tool.registered",
                target=tool,
                source=source,
                after=_snapshot(tool),
            )
    except IntegrityError:
        registered = Tool.objects.filter(tenant=tenant, name=name).first()
        if registered is None:
            raise
        return registered
    return tool


def is_builtin(name: str) -> bool:
    return name in SHELL_TOOLS or catalogue_tool(name) is not None


def unsaved_builtin_tool(*, tenant: Tenant, name: str) -> Tool:
    """A catalogue or shell tool as it would be registered, without writing anything."""
    if not is_builtin(name):
        raise NotFound(f"unknown tool {name!r}: register it first")
    tool = Tool(tenant=tenant, name=name)
    _declare(tool, tenant)  # as ``ensure_catalogue_tool`` registers it
    return tool


def _validated_tools(server_name: str, tools_list: Any) -> list[dict[str, Any]]:
    if not isinstance(tools_list, dict) or not isinstance(tools_list.get("tools"), list):
        raise InvalidInput("an MCP tools/list result is a JSON object with a 'tools' array")
    tools = tools_list["tools"]
    if len(tools) > MAX_IMPORTED_TOOLS:
        raise InvalidInput(f"at most {MAX_IMPORTED_TOOLS} tools can be imported at once")
    names: set[str] = set()
    for index, descriptor in enumerate(tools):
        try:
            name, _description, _annotations = validate_descriptor(descriptor)
        except ValueError as exc:
            raise InvalidInput(f"tools[{index}]: {exc}") from None
        validate_tool_name(f"{server_name}/{name}")
        if name in names:
            raise Conflict(f"tools[{index}]: {name!r} appears twice")
        names.add(name)
    return tools


def import_mcp_tools(
    *,
    tenant: Tenant,
    server_name: str,
    trust: ServerTrust,
    tools_list: Any,
    actor: str,
    source: str,
    key_fields: dict[str, list[str]] | None = None,
    implementation: str = "",
) -> list[Tool]:
    """Import (or refresh) an MCP server's ``tools/list`` result, re-classifying every tool.

    The whole list is validated first; bad input changes nothing. Registry names are
    ``server/tool`` so two servers may offer tools of the same name. ``key_fields`` names what
    identifies the business action of some of the server's tools (by their name on the
    server); a tool not named keeps the key fields it has. ``implementation`` is the name the
    server gave itself (``serverInfo.name``); an import without it keeps the one it has.
    """
    if not isinstance(server_name, str) or not SERVER_NAME.match(server_name):
        raise InvalidInput(f"server name {server_name!r} is not allowed")
    if not isinstance(implementation, str) or len(implementation) > IMPLEMENTATION_MAX:
        raise InvalidInput(f"an implementation name is at most {IMPLEMENTATION_MAX} characters")
    descriptors = _validated_tools(server_name, tools_list)
    schemas = {d["name"]: d.get("inputSchema") for d in descriptors}
    unknown = sorted(set(key_fields or {}) - set(schemas))
    if unknown:
        raise InvalidInput(f"key fields for {unknown[0]!r}, which the server does not list")
    declared = {
        name: _key_fields(paths, schemas[name]) for name, paths in (key_fields or {}).items()
    }
    namespace = catalogue_namespace([d["name"] for d in descriptors])
    rules = _rules(tenant)
    imported: list[Tool] = []
    with transaction.atomic():
        server, created = McpServer.objects.select_for_update().get_or_create(
            tenant=tenant,
            name=server_name,
            defaults={"trust": trust.value, "implementation": implementation},
        )
        if not created and implementation and server.implementation != implementation:
            audit(
                tenant=tenant,
                actor=actor,
                action="mcp_server.implementation_changed",
                target=server,
                source=source,
                before={"implementation": server.implementation},
                after={"implementation": implementation},
            )
            server.implementation = implementation
            server.save(update_fields=["implementation"])
        if not created and server.trust != trust.value:
            audit(
                tenant=tenant,
                actor=actor,
                action="mcp_server.trust_changed",
                target=server,
                source=source,
                before={"trust": server.trust},
                after={"trust": trust.value},
            )
            server.trust = trust.value
            server.save(update_fields=["trust"])
        elif created:
            audit(
                tenant=tenant,
                actor=actor,
                action="mcp_server.registered",
                target=server,
                source=source,
                after={"trust": server.trust, "implementation": server.implementation},
            )
        for descriptor in descriptors:
            name = f"{server_name}/{descriptor['name']}"
            tool = Tool.objects.select_for_update().filter(tenant=tenant, name=name).first()
            before = None if tool is None else _snapshot(tool)
            tool = tool or Tool(tenant=tenant, name=name)
            tool.kind = Tool.Kind.MCP
            tool.server = server
            tool.description = descriptor.get("description") or ""
            tool.descriptor = descriptor
            tool.output_schema = descriptor.get("outputSchema")
            if descriptor["name"] in declared:
                tool.key_fields = declared[descriptor["name"]]
            argument = deciding_argument(descriptor)
            tool.per_call_kind = argument.kind.value if argument else ""
            tool.per_call_argument = argument.name if argument else ""
            _apply(tool, _classify(tool, rules, namespace))
            tool.key_scope = _default_scope(tool, None)
            tool.save()
            after = _snapshot(tool)
            if before is None or _classification(before) != _classification(after):
                audit(
                    tenant=tenant,
                    actor=actor,
                    action="tool.imported" if before is None else "tool.reclassified",
                    target=tool,
                    source=source,
                    before=before,
                    after=after,
                    detail=tool.reason,
                )
            # Key fields given with the import are a declaration like any other (a new tool's
            # default key scope is none).
            keyed = (after["key_fields"], after["key_scope"])
            was = (before["key_fields"], before["key_scope"]) if before else ([], keyed[1])
            if keyed != was:
                audit(
                    tenant=tenant,
                    actor=actor,
                    action="tool.key_fields_declared",
                    target=tool,
                    source=source,
                    before=before,
                    after=after,
                )
            imported.append(tool)
    return imported


def override_tool(
    *,
    tool: Tool,
    idempotency: Idempotency | None,
    reason: str,
    actor: str,
    source: str,
    destructive: bool = False,
) -> Tool:
    """Set (or, with ``idempotency=None``, clear) a human override; a reason is required
    (stored redacted)."""
    if not reason.strip():
        raise InvalidInput("an override needs a reason")
    with transaction.atomic():
        locked = Tool.objects.select_for_update().get(pk=tool.pk)
        before = _snapshot(locked)
        locked.override_idempotency = idempotency.value if idempotency else ""
        locked.override_destructive = destructive if idempotency else False
        locked.override_reason = redact_text(reason.strip()) if idempotency else ""
        locked.overridden_by = actor if idempotency else ""
        locked.overridden_at = db_now() if idempotency else None
        _apply(locked, _classify(locked, _rules(locked.tenant)))
        locked.save()
        audit(
            tenant=locked.tenant_id,
            actor=actor,
            action="tool.override_set" if idempotency else "tool.override_cleared",
            target=locked,
            source=source,
            before=before,
            after=_snapshot(locked),
            detail=reason,
        )
    return locked
