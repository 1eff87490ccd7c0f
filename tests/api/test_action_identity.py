"""An action is its intent, not a transport id (DESIGN section 3): a call of a tool that is not
idempotent is the same action as every call of the same tool and arguments in its run, whatever
its step (a re-sent JSON-RPC request, a re-planned tool call); a read reads again; a business
object or key fields name the action when the runtime knows it."""

from __future__ import annotations

from typing import Any

import pytest

from ledger.domain import Idempotency, ServerTrust
from ledger.models import AuditEvent, IdempotencyRecord, Tenant, Tool
from ledger.services import metrics
from ledger.services.registry import import_mcp_tools, override_tool
from tests.api.conftest import ApiClient, client_for
from tests.factories import make_tool

pytestmark = pytest.mark.django_db


def _call(api: ApiClient, tool: str, tool_input: dict[str, Any], step: str, **extra: Any) -> Any:
    return api.call(tool, tool_input, step_id=step, **extra).json()


def _lost(api: ApiClient, call: dict[str, Any]) -> None:
    api.post(f"/calls/{call['call_id']}/complete", {"fencing_token": 1, "outcome": "uncertain"})


def test_a_replanned_call_with_the_same_arguments_is_the_same_action(api: ApiClient) -> None:
    api.start_run()
    first = _call(api, "create_order", {"cart": "c-9", "amount": 5}, "tool-call-1")
    _lost(api, first)
    again = _call(api, "create_order", {"amount": 5, "cart": "c-9"}, "tool-call-2")
    assert again["idempotency_key"] == first["idempotency_key"]
    assert again["observation"]["code"] == "SIDE_EFFECT_UNCERTAIN"
    assert IdempotencyRecord.objects.get().executions == 1


def test_other_arguments_are_another_action_and_a_new_run_a_new_window(api: ApiClient) -> None:
    api.start_run()
    api.start_run("run-2")
    first = _call(api, "create_order", {"cart": "c-9"}, "s1")
    other = _call(api, "create_order", {"cart": "c-10"}, "s1")
    later = _call(api, "create_order", {"cart": "c-9"}, "s1", run_id="run-2")
    assert len({first["idempotency_key"], other["idempotency_key"], later["idempotency_key"]}) == 3
    assert {c["decision"] for c in (first, other, later)} == {"execute"}


def test_a_read_reads_again_under_a_new_step(api: ApiClient) -> None:
    api.start_run()
    first = _call(api, "read_file", {"path": "a.txt"}, "s1")
    api.post(
        f"/calls/{first['call_id']}/complete",
        {"fencing_token": 1, "outcome": "succeeded", "result": {"content": "old"}},
    )
    again = _call(api, "read_file", {"path": "a.txt"}, "s2")
    same = _call(api, "read_file", {"path": "a.txt"}, "s1")
    assert again["decision"] == "execute"  # a new read
    assert same["decision"] == "recorded_result"  # the same request, re-sent


def test_a_deliberately_repeated_action_names_a_new_business_object(api: ApiClient) -> None:
    api.start_run()
    first = _call(api, "send_email", {"to": "a@example.com"}, "s1", business_object_id="mail-1")
    second = _call(api, "send_email", {"to": "a@example.com"}, "s2", business_object_id="mail-2")
    assert (first["decision"], second["decision"]) == ("execute", "execute")


def test_key_fields_name_the_action_for_an_mcp_tool_declared_through_the_api(
    api: ApiClient, tenant: Tenant
) -> None:
    import_mcp_tools(
        tenant=tenant,
        server_name="gh",
        trust=ServerTrust.UNTRUSTED,
        tools_list={"tools": [{"name": "create_issue", "inputSchema": {"type": "object"}}]},
        actor="t",
        source="api",
    )
    declared = api.client.put(
        "/api/v1/tools/gh/create_issue/key-fields",
        data={"key_fields": ["repo", "title"]},
        content_type="application/json",
        headers=api._headers(),
        secure=True,
    )
    assert declared.status_code == 200, declared.content
    assert declared.json()["key_fields"] == ["repo", "title"]
    event = AuditEvent.objects.get(action="tool.key_fields_declared")
    assert event.after["key_fields"] == ["repo", "title"]
    api.start_run()
    first = _call(api, "gh/create_issue", {"repo": "r", "title": "t", "body": "a"}, "s1")
    reworded = _call(api, "gh/create_issue", {"repo": "r", "title": "t", "body": "b"}, "s2")
    assert first["idempotency_key"].endswith("repo=r,title=t")
    assert reworded["decision"] == "conflict"  # the same issue, other parameters: never a second


def test_key_fields_are_declared_at_import_and_kept_by_a_reimport(tenant: Tenant) -> None:
    listing = {"tools": [{"name": "insert", "inputSchema": {"type": "object"}}]}
    import_mcp_tools(
        tenant=tenant,
        server_name="db",
        trust=ServerTrust.UNTRUSTED,
        tools_list=listing,
        actor="t",
        source="api",
        key_fields={"insert": ["row.id"]},
    )
    import_mcp_tools(
        tenant=tenant,
        server_name="db",
        trust=ServerTrust.UNTRUSTED,
        tools_list=listing,
        actor="t",
        source="api",
    )
    tool = Tool.objects.get(name="db/insert")
    assert (tool.key_fields, tool.key_scope) == (["row.id"], "business")


def test_key_fields_given_at_import_are_audited_as_declared(api: ApiClient) -> None:
    insert = {
        "name": "insert",
        "inputSchema": {"type": "object", "properties": {"row": {"type": "object"}}},
    }
    body = {
        "server": "db",
        "trust": "untrusted",
        "tools_list": {"tools": [insert]},
        "key_fields": {"insert": ["row.id"]},
    }
    assert api.post("/tools/import-mcp", body).status_code == 200
    assert api.post("/tools/import-mcp", body).status_code == 200  # the same: nothing declared
    (event,) = AuditEvent.objects.filter(action="tool.key_fields_declared")
    tool = Tool.objects.get(name="db/insert")
    assert (event.source, event.target_id) == ("api", str(tool.pk))
    assert (event.before, event.after["key_fields"]) == (None, ["row.id"])
    assert event.after["key_scope"] == "business"


def test_key_fields_naming_no_argument_of_the_tool_are_refused_at_import(api: ApiClient) -> None:
    insert = {
        "name": "insert",
        "inputSchema": {"type": "object", "properties": {"row": {"type": "object"}}},
    }
    response = api.post(
        "/tools/import-mcp",
        {
            "server": "db",
            "trust": "untrusted",
            "tools_list": {"tools": [insert]},
            "key_fields": {"insert": ["rows.id"]},
        },
    )
    assert response.status_code == 400 and "'rows.id'" in response.json()["detail"]
    assert not Tool.objects.exists()


def test_key_fields_for_a_tool_the_server_does_not_list_are_refused(api: ApiClient) -> None:
    response = api.post(
        "/tools/import-mcp",
        {
            "server": "db",
            "trust": "untrusted",
            "tools_list": {"tools": [{"name": "insert", "inputSchema": {"type": "object"}}]},
            "key_fields": {"update": ["id"]},
        },
    )
    assert response.status_code == 400 and "'update'" in response.json()["detail"]
    assert not Tool.objects.exists()


def test_a_runtimes_declaration_never_loosens_what_the_ledger_reads(api: ApiClient) -> None:
    loose = api.post("/tools", {"name": "place_order_v2", "idempotency": "idempotent"}).json()
    assert loose["classification"]["idempotency"] == "non_idempotent"
    assert "may only make a tool stricter" in loose["classification"]["reason"]
    described = api.post(
        "/tools",
        {
            "name": "weather_now",
            "idempotency": "idempotent",
            "description": "Returns the weather for a city.",
        },
    ).json()
    assert described["classification"]["idempotency"] == "idempotent"
    stricter = api.post("/tools", {"name": "get_quote", "idempotency": "non_idempotent"}).json()
    assert stricter["classification"]["idempotency"] == "non_idempotent"


def test_a_managers_override_loosens_it_audited(api: ApiClient, tenant: Tenant) -> None:
    api.post("/tools", {"name": "place_order_v2", "idempotency": "idempotent"})
    tool = Tool.objects.get(name="place_order_v2")
    loosened = override_tool(
        tool=tool,
        idempotency=Idempotency.IDEMPOTENT,
        reason="it is a read",
        actor="mia",
        source="console",
    )
    assert loosened.idempotency == "idempotent"
    assert AuditEvent.objects.filter(action="tool.override_set", actor="mia").exists()


def test_duplicate_side_effects_count_a_replay_of_a_tool_wrongly_believed_a_read(
    tenant: Tenant,
) -> None:
    """``fetch_order`` reads as a read and is declared one; it creates orders. Its replay after a
    lost answer is counted, whatever its classification."""
    make_tool(tenant, "fetch_order", declared_idempotency=Idempotency.IDEMPOTENT)
    api = client_for(tenant)
    api.start_run()
    first = _call(api, "fetch_order", {"id": 1}, "s1")
    _lost(api, first)
    replay = _call(api, "fetch_order", {"id": 1}, "s1")
    assert replay["decision"] == "execute"  # an idempotent call whose outcome is unknown
    metrics.roll_up()
    summary = metrics.summarize(tenant)
    assert summary.duplicate_side_effects == 1
