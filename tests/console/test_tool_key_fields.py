"""The Tools page's key fields form (``console:tool_key_fields``): a manager declares what
identifies an MCP tool's business action, audited; anyone else is refused; bad input is a clear
error that changes nothing."""

from __future__ import annotations

import pytest
from django.test import Client

from ledger.domain import ServerTrust
from ledger.models import AuditEvent, Tenant, Tool
from ledger.services.registry import import_mcp_tools
from tests.console.conftest import make_user, signed_in

pytestmark = pytest.mark.django_db

CREATE_ISSUE = {
    "name": "create_issue",
    "description": "Create an issue in a repository.",
    "inputSchema": {
        "type": "object",
        "properties": {
            "repo": {"type": "string"},
            "title": {"type": "string"},
            "body": {"type": "string"},
            "labels": {"type": "array", "items": {"type": "string"}},
        },
        "required": ["repo", "title"],
    },
}


def _create_issue(tenant: Tenant) -> Tool:
    (tool,) = import_mcp_tools(
        tenant=tenant,
        server_name="gh",
        trust=ServerTrust.UNTRUSTED,
        tools_list={"tools": [CREATE_ISSUE]},
        actor="setup",
        source="api",
    )
    return tool


def _declare(client: Client, tool: Tool, key_fields: str, **extra):
    return client.post(
        f"/tools/{tool.pk}/key-fields", {"key_fields": key_fields}, secure=True, **extra
    )


def _declared() -> list[AuditEvent]:
    return list(AuditEvent.objects.filter(action="tool.key_fields_declared"))


def test_a_manager_declares_key_fields_for_an_mcp_tool_audited(django_user_model, tenant) -> None:
    tool = _create_issue(tenant)
    manager = signed_in(make_user(django_user_model, "mgr", tenant, "manager"))
    page = manager.get("/tools/", secure=True)
    assert f'action="/tools/{tool.pk}/key-fields"' in page.content.decode()
    answer = _declare(manager, tool, " repo , title ", follow=True)
    assert answer.status_code == 200
    assert "Key fields of gh/create_issue saved." in answer.content.decode()
    tool.refresh_from_db()
    assert (tool.key_fields, tool.key_scope) == (["repo", "title"], "business")
    (event,) = _declared()
    assert (event.actor, event.source, event.target_id) == ("mgr", "console", str(tool.pk))
    assert (event.before["key_fields"], event.after["key_fields"]) == ([], ["repo", "title"])
    assert event.after["key_scope"] == "business"
    assert "repo, title" in answer.content.decode()  # the page shows them


def test_an_empty_declaration_clears_the_key_fields_audited(django_user_model, tenant) -> None:
    tool = _create_issue(tenant)
    manager = signed_in(make_user(django_user_model, "mgr", tenant, "manager"))
    _declare(manager, tool, "repo, title")
    _declare(manager, tool, "  ")
    tool.refresh_from_db()
    assert tool.key_fields == []
    assert [e.after["key_fields"] for e in _declared()] == [["repo", "title"], []]


@pytest.mark.parametrize("role", ["", "operator", "approver"])
def test_who_is_not_a_manager_is_refused(django_user_model, tenant, role: str) -> None:
    tool = _create_issue(tenant)
    member = signed_in(make_user(django_user_model, "rita", tenant, role))
    assert _declare(member, tool, "repo").status_code == 403
    tool.refresh_from_db()
    assert tool.key_fields == [] and _declared() == []


def test_another_tenants_tool_is_not_found(django_user_model, tenant, other_tenant) -> None:
    tool = _create_issue(other_tenant)
    manager = signed_in(make_user(django_user_model, "mgr", tenant, "manager"))
    assert _declare(manager, tool, "repo").status_code == 404
    tool.refresh_from_db()
    assert tool.key_fields == [] and _declared() == []


def test_only_post_is_allowed(django_user_model, tenant) -> None:
    tool = _create_issue(tenant)
    manager = signed_in(make_user(django_user_model, "mgr", tenant, "manager"))
    response = manager.get(f"/tools/{tool.pk}/key-fields", secure=True)
    assert response.status_code == 405 and response["Allow"] == "POST"


@pytest.mark.parametrize(
    ("key_fields", "problem"),
    [
        ("repo..name", "'repo..name' is not a dotted argument path"),
        ("1repo", "'1repo' is not a dotted argument path"),
        ("repo, title; body", "'title; body' is not a dotted argument path"),
        (",".join(f"f{n}" for n in range(11)), "at most 10 key fields"),
        ("titel", "'titel'"),  # not an argument create_issue takes
        ("repo, labels.first", "'labels.first'"),
    ],
)
def test_bad_key_fields_are_a_clear_error_that_changes_nothing(
    django_user_model, tenant, key_fields: str, problem: str
) -> None:
    tool = _create_issue(tenant)
    manager = signed_in(make_user(django_user_model, "mgr", tenant, "manager"))
    _declare(manager, tool, "repo", follow=True)
    answer = _declare(manager, tool, key_fields, follow=True)
    assert answer.status_code == 200
    shown = [str(message) for message in answer.context["messages"]]
    assert len(shown) == 1 and problem in shown[0], shown
    tool.refresh_from_db()
    assert tool.key_fields == ["repo"]
    assert len(_declared()) == 1  # the first declaration only
