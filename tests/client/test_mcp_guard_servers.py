"""The MCP guard against the official servers, started from the registries (npx), through the
fault-injecting stdio shim: structured results, isError, the key in ``_meta``, lost responses,
a dead server, and file writes settled by hash."""

from __future__ import annotations

import asyncio
import hashlib
import json
import shutil
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from opentelemetry.sdk.trace import TracerProvider

from agent_ledger_client import AsyncLedgerClient
from agent_ledger_client.mcp_guard import KEY_META_KEY, LEDGER_META_KEY, LedgerGuard
from ledger.models import (
    ApprovalRequest,
    IdempotencyRecord,
    PolicyRule,
    Tenant,
    WorkspaceRoot,
    WritePlan,
)
from tests.client.mcp_shim import notifications_log
from tests.client.test_seed_eval_cases import _approve_when_asked

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("npx") is None, reason="the official servers need Node (npx)"),
]
SHIM = Path(__file__).with_name("mcp_shim.py")
FILESYSTEM = ["npx", "-y", "@modelcontextprotocol/server-filesystem"]


def memory_server(folder: Path) -> list[str]:
    """The memory server, keeping its graph in ``folder`` (by default it writes into its own
    package folder, shared by every run)."""
    graph = folder / "memory.jsonl"
    return ["env", f"MEMORY_FILE_PATH={graph}", "npx", "-y", "@modelcontextprotocol/server-memory"]


class Shim:
    def __init__(self, folder: Path) -> None:
        self.faults = folder / "faults.json"
        self.log = folder / "calls.jsonl"
        self.faults.write_text("{}")
        self.log.write_text("")
        notifications_log(self.log).write_text("")

    def arm(self, tool: str, mode: str) -> None:
        self.faults.write_text(json.dumps({"tool": tool, "mode": mode}))

    def calls(self, tool: str) -> list[dict[str, Any]]:
        lines = [json.loads(line) for line in self.log.read_text().splitlines() if line]
        return [call for call in lines if call.get("name") == tool]

    def notifications(self, method: str) -> list[dict[str, Any]]:
        """The notifications the server sent, of ``method``, in order."""
        text = notifications_log(self.log).read_text()
        lines = [json.loads(line) for line in text.splitlines() if line]
        return [note for note in lines if note.get("method") == method]

    def command(self, upstream: list[str]) -> list[str]:
        """The shim's command line, in front of the upstream server's."""
        shim = [str(SHIM), "--faults", str(self.faults), "--log", str(self.log)]
        return [sys.executable, *shim, "--", *upstream]

    def parameters(self, upstream: list[str]) -> StdioServerParameters:
        command, *args = self.command(upstream)
        return StdioServerParameters(command=command, args=args)


Scenario = Callable[[LedgerGuard, Shim], Awaitable[Any]]


def _run(
    live_server: Any, token: str, shim: Shim, upstream: list[str], scenario: Scenario, **guard: Any
) -> Any:
    async def main() -> Any:
        async with (
            stdio_client(shim.parameters(upstream)) as (read, write),
            ClientSession(read, write) as session,
            AsyncLedgerClient(live_server.url, token) as ledger,
            ledger.run(user_id="u1") as run,
        ):
            await session.initialize()
            subject = LedgerGuard(session, ledger, run, **{"tool_timeout": 3, **guard})
            await subject.list_tools()
            return await scenario(subject, shim)

    return asyncio.run(main())


@pytest.fixture
def shim(tmp_path: Path) -> Shim:
    return Shim(tmp_path)


@pytest.fixture
def root(tmp_path: Path) -> Path:
    folder = tmp_path / "files"
    folder.mkdir()
    (folder / "notes.txt").write_text("old\n")
    return folder


def test_a_read_returns_its_structured_result_after_one_execution(
    live_server, ledger_token: str, shim: Shim, root: Path
) -> None:
    async def scenario(guard: LedgerGuard, shim: Shim) -> Any:
        return await guard.call_tool("read_text_file", {"path": str(root / "notes.txt")})

    result = _run(live_server, ledger_token, shim, [*FILESYSTEM, str(root)], scenario, server="fs")
    assert result.is_error is not True
    assert result.structured_content == {"content": "old\n"}
    answer = result.meta[LEDGER_META_KEY]
    assert answer["ok"] is True and answer["replayed"] is False and answer["call_id"]
    assert len(shim.calls("read_text_file")) == 1
    record = IdempotencyRecord.objects.get(tool__name="fs/read_text_file")
    assert (record.state, record.executions) == ("succeeded", 1)


def test_the_idempotency_key_reaches_the_server_in_meta(
    live_server, ledger_token: str, shim: Shim, root: Path
) -> None:
    async def scenario(guard: LedgerGuard, shim: Shim) -> Any:
        return await guard.call_tool(
            "list_directory",
            {"path": str(root)},
            traceparent="00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        )

    result = _run(live_server, ledger_token, shim, [*FILESYSTEM, str(root)], scenario, server="fs")
    (sent,) = shim.calls("list_directory")
    assert sent["_meta"][KEY_META_KEY] == result.meta[LEDGER_META_KEY]["idempotency_key"]
    assert sent["_meta"]["traceparent"].startswith("00-4bf92f35")


def test_the_given_traceparent_reaches_the_ledger_too(
    live_server, ledger_token: str, shim: Shim, root: Path, spans
) -> None:
    async def scenario(guard: LedgerGuard, shim: Shim) -> Any:
        return await guard.call_tool(
            "list_directory",
            {"path": str(root)},
            traceparent="00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        )

    _run(live_server, ledger_token, shim, [*FILESYSTEM, str(root)], scenario, server="fs")
    decided = [s for s in spans.get_finished_spans() if s.name == "execute_tool fs/list_directory"]
    assert decided and {format(s.context.trace_id, "032x") for s in decided} == {
        "4bf92f3577b34da6a3ce929d0e0e4736"
    }


def test_the_callers_current_span_goes_to_the_server_and_the_ledger(
    live_server, ledger_token: str, shim: Shim, root: Path, spans
) -> None:
    agent = TracerProvider().get_tracer("agent")  # the runtime's own tracing

    async def scenario(guard: LedgerGuard, shim: Shim) -> Any:
        with agent.start_as_current_span("invoke_agent") as caller:
            await guard.call_tool("list_directory", {"path": str(root)})
        return caller.get_span_context()

    caller = _run(live_server, ledger_token, shim, [*FILESYSTEM, str(root)], scenario, server="fs")
    trace_id = format(caller.trace_id, "032x")
    (sent,) = shim.calls("list_directory")
    assert sent["_meta"]["traceparent"].startswith(f"00-{trace_id}-")
    ledger_spans = [s for s in spans.get_finished_spans() if s.name.startswith("execute_tool")]
    assert ledger_spans
    assert {format(s.context.trace_id, "032x") for s in ledger_spans} == {trace_id}


def test_is_error_is_a_failed_call_with_its_text(
    live_server, ledger_token: str, shim: Shim, root: Path
) -> None:
    async def scenario(guard: LedgerGuard, shim: Shim) -> Any:
        return await guard.call_tool("read_text_file", {"path": str(root / "missing.txt")})

    result = _run(live_server, ledger_token, shim, [*FILESYSTEM, str(root)], scenario, server="fs")
    observation = json.loads(result.content[0].text)
    assert result.is_error is True and observation["code"] == "MCP_TOOL_ERROR"
    assert "missing.txt" in observation["content"]
    assert IdempotencyRecord.objects.get().state == "failed_final"


def test_a_lost_memory_write_is_never_executed_again(
    live_server, ledger_token: str, shim: Shim, tmp_path: Path
) -> None:
    entity = {"entities": [{"name": "Ada", "entityType": "person", "observations": ["x"]}]}

    async def scenario(guard: LedgerGuard, shim: Shim) -> Any:
        shim.arm("create_entities", "drop_response")
        first = await guard.call_tool("create_entities", entity, tool_call_id="tc-1")
        again = await guard.call_tool("create_entities", entity, tool_call_id="tc-1")
        graph = await guard.call_tool("read_graph", {})
        return first, again, graph

    first, again, graph = _run(
        live_server, ledger_token, shim, memory_server(tmp_path), scenario, server="memory"
    )
    for result in (first, again):
        assert result.is_error is True
        assert json.loads(result.content[0].text)["code"] == "SIDE_EFFECT_UNCERTAIN"
    assert len(shim.calls("create_entities")) == 1
    assert [e["name"] for e in graph.structured_content["entities"]] == ["Ada"]


def test_a_dead_server_is_uncertain(
    live_server, ledger_token: str, shim: Shim, tmp_path: Path
) -> None:
    entity = {"entities": [{"name": "Bo", "entityType": "person", "observations": []}]}

    async def scenario(guard: LedgerGuard, shim: Shim) -> Any:
        shim.arm("create_entities", "kill")
        return await guard.call_tool("create_entities", entity, tool_call_id="tc-1")

    result = _run(
        live_server, ledger_token, shim, memory_server(tmp_path), scenario, server="memory"
    )
    assert json.loads(result.content[0].text)["code"] == "SIDE_EFFECT_UNCERTAIN"
    assert IdempotencyRecord.objects.get().state == "unknown"


def _conditional_writes() -> None:
    """The tenant's policy: file writes are conditional (checked by hash, then approved)."""
    PolicyRule.objects.create(
        tenant=Tenant.objects.get(),
        pattern="fs/write_file",
        idempotency="conditional",
        reason="file writes are settled by the file's hash",
    )


def _lost_write(
    live_server: Any,
    token: str,
    shim: Shim,
    root: Path,
    fault: str,
    *,
    conditional: Callable[[], None] = _conditional_writes,
    **guard: Any,
) -> Any:
    """A write_file of notes.txt ("old" to "new"), made conditional by ``conditional``, whose
    call meets ``fault`` in the shim."""
    conditional()
    target = root / "notes.txt"

    async def scenario(subject: LedgerGuard, shim: Shim) -> Any:
        shim.arm("write_file", fault)
        return await subject.call_tool(
            "write_file", {"path": str(target), "content": "new\n"}, tool_call_id="tc-1"
        )

    upstream = [*FILESYSTEM, str(root)]
    return _run(live_server, token, shim, upstream, scenario, server="fs", file_root=root, **guard)


def test_a_lost_write_file_that_landed_settles_already_applied(
    live_server, ledger_token: str, shim: Shim, root: Path
) -> None:
    result = _lost_write(live_server, ledger_token, shim, root, "drop_response")
    assert result.is_error is False, result.content[0].text
    assert result.meta[LEDGER_META_KEY]["code"] == "ALREADY_APPLIED"
    assert (root / "notes.txt").read_text() == "new\n" and len(shim.calls("write_file")) == 1
    assert IdempotencyRecord.objects.get(tool__name="fs/write_file").state == "succeeded"


def test_a_lost_write_file_under_a_registered_workspace_root_settles_by_hash(
    live_server, ledger_token: str, shim: Shim, root: Path
) -> None:
    def registered_root() -> None:
        WorkspaceRoot.objects.create(tenant=Tenant.objects.get(), name="fs", path=str(root))

    result = _lost_write(
        live_server, ledger_token, shim, root, "drop_response", conditional=registered_root
    )
    assert result.meta[LEDGER_META_KEY]["code"] == "ALREADY_APPLIED", result.content[0].text
    assert len(shim.calls("write_file")) == 1 and not PolicyRule.objects.exists()


def test_a_lost_write_file_that_never_landed_asks_a_human_without_blocking(
    live_server, ledger_token: str, shim: Shim, root: Path
) -> None:
    # "hang": the call never reaches the server.
    result = _lost_write(live_server, ledger_token, shim, root, "hang", wait_for_approval=False)
    assert result.is_error is True
    assert result.meta[LEDGER_META_KEY]["code"] == "APPROVAL_REQUIRED"
    assert (root / "notes.txt").read_text() == "old\n"
    plan = WritePlan.objects.get()
    assert plan.before_hash == hashlib.sha256(b"old\n").hexdigest()
    assert plan.after_hash == hashlib.sha256(b"new\n").hexdigest()
    assert "-old\n+new" in plan.diff


def test_a_lost_write_file_that_never_landed_runs_again_once_approved(
    live_server, ledger_token: str, shim: Shim, root: Path
) -> None:
    approver = _approve_when_asked()
    result = _lost_write(live_server, ledger_token, shim, root, "hang", approval_deadline=15)
    approver.join(15)
    assert result.is_error is False, result.content[0].text
    assert result.meta[LEDGER_META_KEY]["ok"] is True
    assert (root / "notes.txt").read_text() == "new\n"
    assert ApprovalRequest.objects.get().state == "consumed"
    assert IdempotencyRecord.objects.get(tool__name="fs/write_file").state == "succeeded"


def test_a_lost_write_file_whose_file_changed_meanwhile_is_a_conflict(
    live_server, ledger_token: str, shim: Shim, root: Path
) -> None:
    _conditional_writes()
    target = root / "notes.txt"

    async def someone_else_writes() -> None:
        await asyncio.sleep(1)  # while the guard waits for the hung call
        target.write_text("theirs\n")

    async def scenario(subject: LedgerGuard, shim: Shim) -> Any:
        shim.arm("write_file", "hang")
        other = asyncio.create_task(someone_else_writes())
        result = await subject.call_tool(
            "write_file", {"path": str(target), "content": "new\n"}, tool_call_id="tc-1"
        )
        await other
        return result

    upstream = [*FILESYSTEM, str(root)]
    result = _run(live_server, ledger_token, shim, upstream, scenario, server="fs", file_root=root)
    assert result.is_error is True
    assert result.meta[LEDGER_META_KEY]["code"] == "WRITE_CONFLICT"
    assert target.read_text() == "theirs\n" and not ApprovalRequest.objects.exists()


def test_a_write_outside_the_root_fails_before_reaching_the_server(
    live_server, ledger_token: str, shim: Shim, root: Path
) -> None:
    async def scenario(guard: LedgerGuard, shim: Shim) -> Any:
        return await guard.call_tool(
            "write_file", {"path": str(root / ".." / "escape.txt"), "content": "x"}
        )

    result = _run(
        live_server,
        ledger_token,
        shim,
        [*FILESYSTEM, str(root)],
        scenario,
        server="fs",
        file_root=root,
    )
    assert json.loads(result.content[0].text)["code"] == "INVALID_TOOL_INPUT"
    assert shim.calls("write_file") == []
    assert not (root.parent / "escape.txt").exists()
