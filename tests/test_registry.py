"""The registry computes classifications itself, audits overrides and keeps bad input out."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ledger.domain import Idempotency, KeyScope, ReplayPolicy, ServerTrust
from ledger.errors import Conflict, InvalidInput
from ledger.models import AuditEvent, McpServer, PolicyRule, Tool
from ledger.services.registry import (
    import_mcp_tools,
    override_tool,
    register_tool,
)

pytestmark = pytest.mark.django_db
GIT_TOOLS = json.loads(
    (Path(__file__).parent / "fixtures" / "mcp" / "mcp_server_git_tools_list.json").read_text()
)


def _register(tenant, name: str, **kwargs) -> Tool:
    return register_tool(tenant=tenant, name=name, actor="alice", source="api", **kwargs)


def test_catalogue_tool_gets_its_seed_classification_and_scope(tenant) -> None:
    tool = _register(tenant, "charge_customer")
    assert (tool.kind, tool.idempotency, tool.replay_policy) == (
        "builtin",
        "non_idempotent",
        "never",
    )
    assert tool.key_scope == KeyScope.BUSINESS and tool.rule == "catalogue.charge_customer"


def test_undeclared_custom_tool_is_conservative(tenant) -> None:
    tool = _register(tenant, "sync_crm")
    assert tool.replay_policy == ReplayPolicy.NEVER and tool.rule == "default.undeclared"


def test_a_declared_read_is_believed_when_its_name_reads_as_one(tenant) -> None:
    tool = _register(tenant, "get_order", declared_idempotency=Idempotency.IDEMPOTENT)
    assert tool.replay_policy == ReplayPolicy.AUTO


def test_registration_is_audited(tenant) -> None:
    tool = _register(tenant, "price_quote")
    event = AuditEvent.objects.get(action="tool.registered", target_id=str(tool.pk))
    assert event.actor == "alice" and event.after["replay_policy"] == "never"


@pytest.mark.parametrize(
    "name", ["<script>alert(1)</script>", "a b", "", "x" * 201, "bad\x00name", "-leading"]
)
def test_bad_tool_names_are_refused_and_nothing_is_written(tenant, name: str) -> None:
    with pytest.raises(InvalidInput):
        _register(tenant, name)
    assert not Tool.objects.exists() and not AuditEvent.objects.exists()


def test_mcp_import_reclassifies_every_tool(tenant) -> None:
    tools = import_mcp_tools(
        tenant=tenant,
        server_name="git",
        trust=ServerTrust.UNTRUSTED,
        tools_list=GIT_TOOLS,
        actor="alice",
        source="api",
    )
    by_name = {t.name: t for t in tools}
    assert by_name["git/git_status"].replay_policy == ReplayPolicy.AUTO
    assert by_name["git/git_commit"].replay_policy == ReplayPolicy.NEVER
    assert by_name["git/git_reset"].destructive
    assert McpServer.objects.get(tenant=tenant, name="git").trust == "untrusted"


def test_mcp_reimport_with_trust_change_is_audited_and_reclassifies(tenant) -> None:
    import_mcp_tools(
        tenant=tenant,
        server_name="git",
        trust=ServerTrust.UNTRUSTED,
        tools_list=GIT_TOOLS,
        actor="alice",
        source="api",
    )
    import_mcp_tools(
        tenant=tenant,
        server_name="git",
        trust=ServerTrust.TRUSTED,
        tools_list=GIT_TOOLS,
        actor="bob",
        source="api",
    )
    assert Tool.objects.get(name="git/git_branch").replay_policy == ReplayPolicy.AUTO
    assert AuditEvent.objects.filter(action="mcp_server.trust_changed", actor="bob").exists()


def test_a_reference_servers_reads_are_reads_once_it_names_itself(tenant) -> None:
    """Untrusted and nameless, mcp-server-git's git_log is kept as a possible write (its word
    ``log`` also writes); imported again with the name it gives itself, it is a read, audited;
    an import that names no implementation keeps the one the server has."""

    def imported(**named: str) -> Tool:
        import_mcp_tools(
            tenant=tenant,
            server_name="git",
            trust=ServerTrust.UNTRUSTED,
            tools_list=GIT_TOOLS,
            actor="alice",
            source="api",
            **named,
        )
        return Tool.objects.get(name="git/git_log")

    assert imported().replay_policy == ReplayPolicy.NEVER
    log = imported(implementation="mcp-git")
    assert (log.replay_policy, log.rule) == (ReplayPolicy.AUTO, "mcp.known_server.read")
    assert Tool.objects.get(name="git/git_commit").replay_policy == ReplayPolicy.NEVER
    changed = AuditEvent.objects.get(action="mcp_server.implementation_changed")
    assert changed.before == {"implementation": ""}
    assert changed.after == {"implementation": "mcp-git"}
    assert imported().rule == "mcp.known_server.read"
    assert McpServer.objects.get(name="git").implementation == "mcp-git"


def test_an_overlong_implementation_name_is_refused_and_changes_nothing(tenant) -> None:
    with pytest.raises(InvalidInput, match="implementation"):
        import_mcp_tools(
            tenant=tenant,
            server_name="git",
            trust=ServerTrust.UNTRUSTED,
            tools_list=GIT_TOOLS,
            actor="alice",
            source="api",
            implementation="x" * 201,
        )
    assert not McpServer.objects.exists() and not Tool.objects.exists()


@pytest.mark.parametrize(
    "bad",
    [
        [],
        {"tools": "x"},
        {"tools": [{"name": "ok"}, {"description": "no name"}]},
        {"tools": [{"name": "<b>x</b>"}]},
        {"tools": [{"name": "a"}, {"name": "a"}]},
    ],
)
def test_bad_mcp_import_changes_nothing(tenant, bad) -> None:
    with pytest.raises((InvalidInput, Conflict)):
        import_mcp_tools(
            tenant=tenant,
            server_name="srv",
            trust=ServerTrust.UNTRUSTED,
            tools_list=bad,
            actor="alice",
            source="api",
        )
    assert not Tool.objects.exists() and not McpServer.objects.exists()


def test_override_needs_a_reason_and_is_audited_with_before_and_after(tenant) -> None:
    tool = _register(tenant, "sync_crm")
    with pytest.raises(InvalidInput):
        override_tool(
            tool=tool, idempotency=Idempotency.IDEMPOTENT, reason=" ", actor="bob", source="console"
        )
    tool = override_tool(
        tool=tool,
        idempotency=Idempotency.IDEMPOTENT,
        reason="read-only sync, checked with CRM team",
        actor="bob",
        source="console",
    )
    assert tool.replay_policy == ReplayPolicy.AUTO and tool.rule == "override"
    event = AuditEvent.objects.get(action="tool.override_set")
    assert (event.before["replay_policy"], event.after["replay_policy"]) == ("never", "auto")
    cleared = override_tool(
        tool=tool, idempotency=None, reason="undo", actor="bob", source="console"
    )
    assert cleared.replay_policy == ReplayPolicy.NEVER


def test_policy_rules_apply_when_a_tool_is_registered(tenant) -> None:
    PolicyRule.objects.create(
        tenant=tenant,
        pattern="billing_*",
        idempotency=Idempotency.CONDITIONAL,
        reason="finance review",
    )
    tool = _register(tenant, "billing_lookup", declared_idempotency=Idempotency.IDEMPOTENT)
    assert tool.replay_policy == ReplayPolicy.ASK and tool.rule.startswith("policy.")


def test_policy_of_one_tenant_does_not_touch_another(tenant, other_tenant) -> None:
    PolicyRule.objects.create(
        tenant=tenant, pattern="*", idempotency=Idempotency.NON_IDEMPOTENT, reason="lockdown"
    )
    theirs = _register(other_tenant, "list_orders", declared_idempotency=Idempotency.IDEMPOTENT)
    assert theirs.replay_policy == ReplayPolicy.AUTO


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_concurrent_declarations_of_a_new_tool_all_succeed() -> None:
    """Runtimes declaring the same new tool at once: one registers it, the others update the
    row it committed; none of the insert's losers fails with an IntegrityError."""
    import threading
    from concurrent.futures import ThreadPoolExecutor

    from django.db import connections

    from tests.factories import make_tenant

    tenant = make_tenant("declare")
    callers = 8
    barrier = threading.Barrier(callers)

    def declare(index: int) -> int:
        try:
            barrier.wait(timeout=30)
            return register_tool(
                tenant=tenant,
                name="sync_inventory",
                actor=f"runtime-{index}",
                source="api",
                declared_idempotency=Idempotency.IDEMPOTENT,
            ).pk
        finally:
            connections.close_all()

    with ThreadPoolExecutor(max_workers=callers) as pool:
        ids = set(pool.map(declare, range(callers)))
    assert len(ids) == 1 and Tool.objects.filter(tenant=tenant).count() == 1
    actions = sorted(
        AuditEvent.objects.filter(tenant=tenant, target_type="tool").values_list(
            "action", flat=True
        )
    )
    assert actions == ["tool.registered"] + ["tool.updated"] * (callers - 1)


def _catalogue(name: str) -> dict:
    return json.loads(
        (Path(__file__).parent / "fixtures" / "mcp" / f"{name}_tools_list.json").read_text()
    )


def _import(tenant, server: str, catalogue: str, trust=ServerTrust.UNTRUSTED) -> dict[str, Tool]:
    tools = import_mcp_tools(
        tenant=tenant,
        server_name=server,
        trust=trust,
        tools_list=_catalogue(catalogue),
        actor="alice",
        source="api",
    )
    return {t.name.split("/", 1)[1]: t for t in tools}


def test_mcp_import_stores_the_argument_that_decides_each_call(tenant) -> None:
    pg = _import(tenant, "pg", "server_postgres", trust=ServerTrust.TRUSTED)
    fs = _import(tenant, "fs", "server_filesystem")
    assert (pg["query"].per_call_kind, pg["query"].per_call_argument) == ("sql", "sql")
    assert pg["query"].replay_policy == ReplayPolicy.NEVER
    assert pg["query"].rule == "mcp.per_call.sql"
    assert (fs["write_file"].per_call_kind, fs["write_file"].per_call_argument) == (
        "file_write",
        "path",
    )
    assert fs["edit_file"].per_call_kind == "" and fs["read_file"].per_call_kind == ""
    event = AuditEvent.objects.get(action="tool.imported", target_id=str(pg["query"].pk))
    assert event.after["per_call"] == "sql:sql"


def test_clearing_an_override_keeps_a_servers_namespace(tenant) -> None:
    maps = _import(tenant, "maps", "server_google_maps")
    assert maps["maps_geocode"].replay_policy == ReplayPolicy.AUTO
    overridden = override_tool(
        tool=maps["maps_geocode"],
        idempotency=Idempotency.NON_IDEMPOTENT,
        reason="audit",
        actor="bob",
        source="console",
    )
    assert overridden.replay_policy == ReplayPolicy.NEVER
    cleared = override_tool(
        tool=maps["maps_geocode"], idempotency=None, reason="none", actor="bob", source="console"
    )
    assert cleared.replay_policy == ReplayPolicy.AUTO


def test_a_registered_code_argument_classifies_each_call_from_it(tenant) -> None:
    from ledger.classification.arguments import DecidingArgument
    from ledger.classification.calls import classify_tool_call
    from ledger.domain import PerCall

    tool = _register(
        tenant,
        "warehouse_sql",
        declared_idempotency=Idempotency.IDEMPOTENT,
        code_argument=DecidingArgument(PerCall.SQL, "q"),
    )
    assert tool.replay_policy == ReplayPolicy.NEVER and tool.rule == "mcp.per_call.sql"
    assert classify_tool_call(tool, {"q": "SELECT 1"}).replay_policy is ReplayPolicy.AUTO
    assert classify_tool_call(tool, {"q": "SELECT 1; DELETE FROM t"}).replay_policy is (
        ReplayPolicy.NEVER
    )
    with pytest.raises(InvalidInput):
        classify_tool_call(tool, {"sql": "SELECT 1"})


def test_a_code_argument_hint_without_a_name_is_refused(tenant) -> None:
    from ledger.classification.arguments import DecidingArgument
    from ledger.domain import PerCall

    with pytest.raises(InvalidInput):
        _register(tenant, "warehouse_sql", code_argument=DecidingArgument(PerCall.SQL, " "))
    assert not Tool.objects.exists()
