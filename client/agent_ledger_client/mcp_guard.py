"""An MCP guard: put Agent Ledger between a runtime and an MCP server.

    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        guard = LedgerGuard(session, ledger, run, server="git", trust="untrusted")
        await guard.list_tools()                     # imported and re-classified
        result = await guard.call_tool("git_status", {"repo_path": repo}, tool_call_id="t1")

``list_tools`` imports the server's tools into the registry, where they are re-classified
(an untrusted server's annotations can only make a tool more conservative). ``call_tool`` goes
through the ledger, as the MCP specification has a tool call:

- the idempotency key (and the W3C ``traceparent``, given or the caller's current span's) goes
  to the server in the request's ``_meta``, and the ``traceparent`` to the ledger too; the
  ledger's answer comes back in the result's ``_meta`` under ``io.agentledger/ledger``;
- ``isError: true`` is a failed call carrying its text; a timeout, a dead server or a broken
  pipe is uncertain; the server's ``outputSchema`` is checked against ``structuredContent``;
- a refusal comes back as an error result whose text is the model-facing observation, so the
  model never mistakes it for success; so does a call refused because its run has ended
  (``RUN_FINISHED``, ``RUN_HALTED``), which is the agent's news, not a protocol error;
  approval waits are bounded (``approval_deadline``) and ``wait_for_approval=False`` returns
  ``APPROVAL_REQUIRED`` at once;
- with ``file_root`` set, a file write under that root carries a write plan the guard computes
  (before hash, after hash, diff), and a write whose outcome was lost settles by the file's
  hash: already applied, apply again after approval, or a conflict.

Requires the ``mcp`` extra (``pip install "agent-ledger-client[mcp]"``).
"""

from __future__ import annotations

import difflib
import hashlib
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any, cast

import jsonschema
from mcp import ClientSession
from mcp.types import CallToolResult, ListToolsResult, RequestParamsMeta, TextContent

from agent_ledger_client.aio import AsyncLedgerClient, AsyncRun
from agent_ledger_client.errors import InvalidToolInput, LedgerRequestError, ToolError
from agent_ledger_client.observations import run_ended
from agent_ledger_client.protocol import DEFAULT_APPROVAL_DEADLINE, CallContext
from agent_ledger_client.surface import trace_headers

#: Where the ledger's answer goes in a result's ``_meta``.
LEDGER_META_KEY = "io.agentledger/ledger"
#: Where the idempotency key goes in a request's ``_meta``.
KEY_META_KEY = "io.agentledger/idempotency-key"
#: File-writing tools (of @modelcontextprotocol/server-filesystem) and the argument that holds
#: the new content.
FILE_WRITE_TOOLS: Mapping[str, str] = {"write_file": "content"}
#: The ledger's refusals of a call whose run has ended.
RUN_ENDED = frozenset({"RUN_FINISHED", "RUN_HALTED"})
MAX_DIFF = 200_000


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


class FileWrites:
    """Write plans for file tools whose files lie under ``root``."""

    def __init__(self, root: str | Path, tools: Mapping[str, str] = FILE_WRITE_TOOLS) -> None:
        self.root = Path(root).resolve()
        self.tools = dict(tools)

    def target(self, arguments: Mapping[str, Any]) -> Path:
        """The file a call writes, confined to the root (no ``..``, no symlink escape)."""
        raw = arguments.get("path")
        if not isinstance(raw, str) or not raw:
            raise InvalidToolInput("a file write needs a path")
        path = Path(raw)
        resolved = (path if path.is_absolute() else self.root / path).resolve()
        if not resolved.is_relative_to(self.root):
            raise InvalidToolInput(f"{raw} is outside the workspace root")
        return resolved

    def current_hash(self, target: Path) -> str:
        return _sha256(target.read_bytes() if target.is_file() else b"")

    def plan(self, workspace: str, name: str, arguments: Mapping[str, Any]) -> dict[str, Any]:
        target = self.target(arguments)
        content = arguments.get(self.tools[name])
        if not isinstance(content, str):
            raise InvalidToolInput(f"{name} needs its {self.tools[name]} as text")
        before = target.read_bytes() if target.is_file() else b""
        relative = target.relative_to(self.root).as_posix()
        diff = difflib.unified_diff(
            before.decode(errors="replace").splitlines(keepends=True),
            content.splitlines(keepends=True),
            f"a/{relative}",
            f"b/{relative}",
        )
        return {
            "workspace": workspace,
            "path": relative,
            "before_hash": _sha256(before),
            "after_hash": _sha256(content.encode()),
            "diff": "".join(diff)[:MAX_DIFF],
        }


class LedgerGuard:
    """An MCP ``ClientSession`` whose tool calls go through the ledger."""

    def __init__(
        self,
        session: ClientSession,
        ledger: AsyncLedgerClient,
        run: AsyncRun,
        *,
        server: str,
        trust: str = "untrusted",
        file_root: str | Path | None = None,
        wait_for_approval: bool = True,
        approval_deadline: float = DEFAULT_APPROVAL_DEADLINE,
        tool_timeout: float | None = None,
        key_fields: Mapping[str, list[str]] | None = None,
    ) -> None:
        self.session = session
        self.ledger = ledger
        self.run = run
        self.server = server
        self.trust = trust
        self.files = FileWrites(file_root) if file_root is not None else None
        self.wait_for_approval = wait_for_approval
        self.approval_deadline = approval_deadline
        self.tool_timeout = tool_timeout
        #: What identifies some tools' business action, declared at import (by tool name).
        self.key_fields = dict(key_fields or {})
        self.output_schemas: dict[str, dict[str, Any]] = {}

    async def list_tools(self) -> ListToolsResult:
        """The server's tools, after importing them into the ledger's registry."""
        result = await self.session.list_tools()
        listing = result.model_dump(mode="json", by_alias=True, exclude_none=True)
        self.output_schemas = {
            tool["name"]: tool["outputSchema"]
            for tool in listing["tools"]
            if "outputSchema" in tool
        }
        info = getattr(self.session, "server_info", None)  # the initialize result's serverInfo
        await self.ledger.import_mcp_tools(
            self.server,
            self.trust,
            {"tools": listing["tools"]},
            key_fields=self.key_fields,
            implementation=getattr(info, "name", None),
        )
        return result

    async def call_tool(
        self,
        name: str,
        arguments: dict[str, Any] | None = None,
        *,
        tool_call_id: str | None = None,
        business_object_id: str | None = None,
        traceparent: str | None = None,
        **options: Any,
    ) -> CallToolResult:
        """Call ``name`` on the server through the ledger. The trace context (``traceparent``,
        else the caller's current OpenTelemetry span) goes to the ledger and to the server."""
        arguments = arguments or {}
        traceparent = traceparent or trace_headers().get("traceparent")
        plan: dict[str, Any] | None = None
        refused: InvalidToolInput | None = None
        if self.files is not None and name in self.files.tools:
            try:
                plan = self.files.plan(self.server, name, arguments)
            except InvalidToolInput as exc:
                refused = exc

        async def execute(ctx: CallContext) -> dict[str, Any]:
            if refused is not None:
                raise refused  # the guard's own check, before anything reached the server
            meta: dict[str, Any] = {KEY_META_KEY: ctx.idempotency_key}
            if traceparent:
                meta["traceparent"] = traceparent
            result = await self.session.call_tool(
                name,
                arguments,
                read_timeout_seconds=self.tool_timeout,
                meta=cast(RequestParamsMeta, meta),
            )
            data = result.model_dump(mode="json", by_alias=True, exclude_none=True)
            if data.get("isError"):
                raise ToolError("MCP_TOOL_ERROR", _text(data)[:4000])
            return data

        settings: dict[str, Any] = {
            "wait_for_approval": self.wait_for_approval,
            "approval_deadline": self.approval_deadline,
            "traceparent": traceparent,
            **options,
        }
        if self.tool_timeout is not None:
            settings.setdefault("timeout", self.tool_timeout + 1)
        try:
            observation = await self.run.call(
                f"{self.server}/{name}",
                arguments,
                execute=execute,
                step_id=tool_call_id,
                business_object_id=business_object_id,
                write_plan=plan,
                **settings,
            )
        except LedgerRequestError as exc:
            if exc.problem.get("code") not in RUN_ENDED:
                raise
            observation = run_ended(exc.problem)
        if plan is not None and _lost(observation):
            observation = await self._settle_write(observation, arguments, execute, settings)
        return result_of(observation, self.output_schemas.get(name))

    async def _settle_write(
        self,
        observation: dict[str, Any],
        arguments: dict[str, Any],
        execute: Any,
        settings: dict[str, Any],
    ) -> dict[str, Any]:
        """A write whose outcome was lost, settled by the file's hash now."""
        assert self.files is not None
        current = self.files.current_hash(self.files.target(arguments))
        return await self.ledger.replay(
            observation["metadata"]["call_id"],
            arguments,
            execute=execute,
            current_hash=current,
            wait_for_approval=settings["wait_for_approval"],
            approval_deadline=settings["approval_deadline"],
        )


def _lost(observation: dict[str, Any]) -> bool:
    metadata = observation.get("metadata", {})
    return (
        observation.get("code") == "SIDE_EFFECT_UNCERTAIN"
        and metadata.get("replay_policy") == "ask"
        and bool(metadata.get("call_id"))
    )


def ledger_meta(observation: dict[str, Any]) -> dict[str, Any]:
    """The ledger's answer as it goes into a result's ``_meta``."""
    metadata = observation.get("metadata", {})
    answer = {"ok": bool(observation.get("ok")), "code": observation.get("code")}
    for name in ("call_id", "idempotency_key", "replayed", "next_action", "recorded"):
        if name in metadata:
            answer[name] = metadata[name]
    return answer


def result_of(
    observation: dict[str, Any], output_schema: dict[str, Any] | None = None
) -> CallToolResult:
    """The MCP result for an observation: the server's own result when the call succeeded,
    else a result whose text is the observation (an error unless it is a success such as
    ``ALREADY_APPLIED``); the ledger's answer in ``_meta``."""
    meta = {LEDGER_META_KEY: ledger_meta(observation)}
    content = observation.get("content")
    if observation.get("ok") and isinstance(content, dict) and "content" in content:
        result = CallToolResult.model_validate(content)
        result.meta = {**(result.meta or {}), **meta}
        return result
    text = json.dumps(observation)
    structured: dict[str, Any] | None = None
    if observation.get("ok") and output_schema is not None:
        # A success the ledger answered itself still owes a tool with an outputSchema its
        # structuredContent; the text result fits the usual {"content": string} shape.
        candidate = {"content": text}
        if jsonschema.Draft202012Validator(output_schema).is_valid(candidate):
            structured = candidate
    return CallToolResult(
        content=[TextContent(type="text", text=text)],
        structured_content=structured,
        is_error=not observation.get("ok"),
        _meta=meta,
    )


def _text(data: dict[str, Any]) -> str:
    parts = [c.get("text", "") for c in data.get("content", []) if isinstance(c, dict)]
    return " ".join(p for p in parts if p) or "the tool reported an error"
