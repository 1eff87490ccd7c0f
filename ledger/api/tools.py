"""Tool registry endpoints."""

from __future__ import annotations

from django.http import HttpRequest
from ninja import Router

from ledger.api.auth import TokenAuth, caller_of
from ledger.api.schemas import (
    ClassificationOut,
    ClassifyIn,
    KeyFieldsIn,
    McpImportIn,
    Problem,
    ToolIn,
    ToolOut,
)
from ledger.classification.calls import classify_tool_call, stored_classification
from ledger.domain import ServerTrust
from ledger.errors import NotFound
from ledger.models import Tool, WorkspaceRoot
from ledger.permissions import Scope
from ledger.services.registry import (
    declare_key_fields,
    import_mcp_tools,
    register_tool,
    unsaved_builtin_tool,
)

router = Router(tags=["tools"], auth=TokenAuth(Scope.TOOLS))
ERRORS = {400: Problem, 401: Problem}


def tool_out(tool: Tool) -> ToolOut:
    return ToolOut(
        name=tool.name,
        kind=tool.kind,
        server=tool.server.name if tool.server else None,
        description=tool.description,
        key_scope=tool.key_scope,
        key_fields=list(tool.key_fields or []),
        output_schema=tool.output_schema,
        classification=ClassificationOut.of(stored_classification(tool)),
        overridden=bool(tool.override_idempotency),
    )


@router.post("", response={200: ToolOut, **ERRORS}, summary="Register or update a tool")
def register(request: HttpRequest, payload: ToolIn) -> ToolOut:
    """Declare one of your runtime's tools. The server computes its classification; a tool
    with no declared idempotency is non-idempotent."""
    caller = caller_of(request)
    tool = register_tool(
        tenant=caller.tenant,
        name=payload.name,
        actor=caller.identity,
        source="api",
        declared_idempotency=payload.idempotency,
        description=payload.description,
        output_schema=payload.output_schema,
        key_scope=payload.key_scope,
        key_fields=payload.key_fields,
    )
    return tool_out(tool)


@router.get("", response={200: list[ToolOut], 401: Problem}, summary="List tools")
def list_tools(request: HttpRequest) -> list[ToolOut]:
    caller = caller_of(request)
    tools = Tool.objects.filter(tenant=caller.tenant).select_related("server").order_by("name")
    return [tool_out(tool) for tool in tools[:1000]]


@router.post(
    "/import-mcp",
    response={200: list[ToolOut], 409: Problem, **ERRORS},
    summary="Import an MCP server's tools/list result",
)
def import_mcp(request: HttpRequest, payload: McpImportIn) -> list[ToolOut]:
    """Every tool is re-classified; an untrusted server's claims only make tools more
    conservative. Registry names are ``server/tool``."""
    caller = caller_of(request)
    tools = import_mcp_tools(
        tenant=caller.tenant,
        server_name=payload.server,
        trust=ServerTrust(payload.trust),
        tools_list=payload.tools_list.model_dump(mode="json", exclude_none=True),
        actor=caller.identity,
        source="api",
        key_fields=payload.key_fields,
        implementation=payload.implementation or "",
    )
    return [tool_out(tool) for tool in tools]


@router.put(
    "/{path:name}/key-fields",
    response={200: ToolOut, 404: Problem, **ERRORS},
    summary="Declare what identifies a tool's business action",
)
def put_key_fields(request: HttpRequest, name: str, payload: KeyFieldsIn) -> ToolOut:
    """For any tool, imported from an MCP server or not; audited. A call of the tool is then
    the same action as every call with the same values at those paths, whatever its step or
    JSON-RPC id (a non-idempotent tool with key fields defaults to the ``business`` scope)."""
    caller = caller_of(request)
    tool = declare_key_fields(
        tenant=caller.tenant,
        name=name,
        key_fields=payload.key_fields,
        key_scope=payload.key_scope,
        actor=caller.identity,
        source="api",
    )
    return tool_out(tool)


@router.post(
    "/classify",
    response={200: ClassificationOut, **ERRORS, 404: Problem},
    summary="Classify a call without recording anything",
)
def classify(request: HttpRequest, payload: ClassifyIn) -> ClassificationOut:
    caller = caller_of(request)
    tool = Tool.objects.filter(tenant=caller.tenant, name=payload.tool).first()
    if tool is None:
        tool = unsaved_builtin_tool(tenant=caller.tenant, name=payload.tool)
    roots = WorkspaceRoot.paths_for(tool)
    return ClassificationOut.of(classify_tool_call(tool, payload.input, roots=roots))


@router.get(
    "/{path:name}", response={200: ToolOut, 401: Problem, 404: Problem}, summary="Get a tool"
)
def get_tool(request: HttpRequest, name: str) -> ToolOut:
    caller = caller_of(request)
    tool = Tool.objects.filter(tenant=caller.tenant, name=name).select_related("server").first()
    if tool is None:
        raise NotFound(f"no tool {name!r}")
    return tool_out(tool)
