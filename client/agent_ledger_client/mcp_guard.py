"""An MCP guard: put Agent Ledger between a runtime and an MCP server.

    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        guard = LedgerGuard(session, ledger, run, server="git", trust="untrusted")
        await guard.list_tools()                     # imported and re-classified
        result = await guard.call_tool("git_status", {"repo_path": repo}, tool_call_id="t1")

``list_tools`` imports the server's tools into the registry, where they are re-classified
(an untrusted server's annotations can only make a tool more conservative). ``call_tool`` goes
through the ledger: the key comes from the run and the tool call id (or a business object), a
duplicate returns the recorded result, and a refusal comes back as an MCP error result whose
text is the model-facing observation, so the model never mistakes it for success.

Requires the ``mcp`` package (``pip install mcp``); the rest of the client does not.
"""

from __future__ import annotations

import json
from typing import Any

from mcp import ClientSession
from mcp.types import CallToolResult, ListToolsResult, TextContent

from agent_ledger_client.aio import AsyncLedgerClient, AsyncRun
from agent_ledger_client.errors import ToolError
from agent_ledger_client.protocol import CallContext


class LedgerGuard:
    def __init__(
        self,
        session: ClientSession,
        ledger: AsyncLedgerClient,
        run: AsyncRun,
        *,
        server: str,
        trust: str = "untrusted",
    ) -> None:
        self.session = session
        self.ledger = ledger
        self.run = run
        self.server = server
        self.trust = trust

    async def list_tools(self) -> ListToolsResult:
        """The server's tools, after importing them into the ledger's registry."""
        result = await self.session.list_tools()
        listing = result.model_dump(mode="json", by_alias=True, exclude_none=True)
        await self.ledger.import_mcp_tools(self.server, self.trust, {"tools": listing["tools"]})
        return result

    async def call_tool(
        self,
        name: str,
        arguments: dict[str, Any] | None = None,
        *,
        tool_call_id: str | None = None,
        business_object_id: str | None = None,
        **options: Any,
    ) -> CallToolResult:
        """Call ``name`` on the server through the ledger."""
        arguments = arguments or {}

        async def execute(ctx: CallContext) -> dict[str, Any]:
            result = await self.session.call_tool(name, arguments)
            data = result.model_dump(mode="json", by_alias=True, exclude_none=True)
            if getattr(result, "is_error", False):
                raise ToolError("MCP_TOOL_ERROR", _text(data)[:4000])
            return data

        observation = await self.run.call(
            f"{self.server}/{name}",
            arguments,
            execute=execute,
            step_id=tool_call_id,
            business_object_id=business_object_id,
            **options,
        )
        if observation.get("ok"):
            return CallToolResult.model_validate(observation["content"])
        return CallToolResult(
            content=[TextContent(type="text", text=json.dumps(observation))], is_error=True
        )


def _text(data: dict[str, Any]) -> str:
    parts = [c.get("text", "") for c in data.get("content", []) if isinstance(c, dict)]
    return " ".join(p for p in parts if p) or "the tool reported an error"
