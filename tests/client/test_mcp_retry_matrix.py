"""One business result per intent, however the runtime retries: every write tool of the
filesystem, memory, git and sqlite servers, its response lost after the server acted, retried
in every shape an MCP client retries in (``mcp_retries``), through ``agent-ledger-mcp``. The
effect is counted in the server's real state (``mcp_effects``), never in the ledger's rows:
exactly one, and the client is told ``SIDE_EFFECT_UNCERTAIN`` as a tool result, never a
protocol error, and the server never runs the tool a second time."""

from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path

import pytest

from tests.client.mcp_effects import WRITE_TOOLS, World, WriteTool
from tests.client.mcp_retries import SHAPES, Answer, Proxy, acted, answer_of, undo
from tests.client.test_mcp_guard_servers import Shim

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("npx") is None, reason="the official servers need Node (npx)"),
]
#: A killed proxy's call holds its record until the lease lapses (its holder is silent); a
#: short lease keeps the retry's wait short.
LEASE_SECONDS = 4
#: `make test` takes each server and each shape at least once; `make drill` (marker `scale`)
#: runs the whole matrix.
EACH_ONCE = {
    ("fs/write_file", "same-id-stdio"),
    ("memory/create_relations", "same-id-http"),
    ("git/git_commit", "new-id"),
    ("sqlite/write_query", "reconnect-http"),
    ("fs/move_file", "restart-stdio"),
    ("sqlite/append_insight", "kill-restart"),
    ("git/git_checkout", "replan"),
}


def _cases() -> list[object]:
    return [
        pytest.param(
            tool,
            shape,
            id=f"{tool.id}-{shape}",
            marks=() if (tool.id, shape) in EACH_ONCE else pytest.mark.scale,
        )
        for tool in WRITE_TOOLS
        for shape in SHAPES
    ]


@pytest.mark.parametrize(("tool", "shape"), _cases())
def test_a_lost_write_retried_has_one_effect_and_an_uncertain_answer(
    tool: WriteTool,
    shape: str,
    live_server,
    ledger_token: str,
    tmp_path: Path,
    settings,
    request: pytest.FixtureRequest,
) -> None:
    settings.LEDGER_LEASE_SECONDS = LEASE_SECONDS
    sqlite = request.getfixturevalue("sqlite_server") if tool.server == "sqlite" else None
    world = World(tmp_path, Shim(tmp_path), sqlite)
    tool.prepare(world)
    proxy = Proxy(live_server, ledger_token, world, tool.server)

    answers = asyncio.run(SHAPES[shape](proxy, tool))

    assert len(world.shim.calls(tool.name)) == 1, f"the server was asked to run {tool.id} again"
    assert tool.applied(world) is (tool.undo is None), f"{tool.id} took effect again"
    assert answers, "the client was told nothing"
    for answer in answers:
        assert answer.protocol_error is None, answer
        assert answer.is_error and answer.code == "SIDE_EFFECT_UNCERTAIN", answer


def test_the_matrix_covers_every_write_tool_of_each_server() -> None:
    """The write tools each annotated server lists (no ``readOnlyHint``), as recorded in
    tests/fixtures/mcp, are the ones the matrix calls. (mcp-server-sqlite annotates nothing:
    its writes are the two SQL tools given writing statements and ``append_insight``.)"""
    fixtures = Path(__file__).parents[1] / "fixtures" / "mcp"
    listed = {
        "fs": "server_filesystem_tools_list.json",
        "memory": "server_memory_tools_list.json",
        "git": "mcp_server_git_tools_list.json",
    }
    for server, name in listed.items():
        tools = json.loads((fixtures / name).read_text())["tools"]
        writes = {
            tool["name"]
            for tool in tools
            if not (tool.get("annotations") or {}).get("readOnlyHint")
        }
        assert writes == {t.name for t in WRITE_TOOLS if t.server == server}, server


@pytest.mark.parametrize("declared", [True, False], ids=["key-fields", "arguments"])
def test_a_reworded_replan_is_the_same_action_only_under_key_fields(
    declared: bool, live_server, ledger_token: str, tmp_path: Path
) -> None:
    """The model plans the lost call again in other words (another observation of the same
    entity). Keyed by its arguments it is another action and runs; with ``--key-fields``
    naming what identifies it (the entity's name) it is the same action with other
    parameters: refused ``IDEMPOTENCY_KEY_CONFLICT``, never run."""
    (tool,) = [t for t in WRITE_TOOLS if t.id == "memory/create_entities"]
    world = World(tmp_path, Shim(tmp_path))
    tool.prepare(world)
    extra = ("--key-fields", "create_entities=entities.0.name") if declared else ()
    proxy = Proxy(live_server, ledger_token, world, tool.server, extra)
    reworded = {"entities": [{"name": "Ada", "entityType": "person", "observations": ["x!"]}]}

    async def scenario() -> list[Answer]:
        async with proxy.stdio() as session:
            world.shim.arm(tool.name, "drop_response")
            first = await session.call_tool(tool.name, tool.arguments(world))
            await acted(world, tool)
            undo(world, tool)
            again = await session.call_tool(tool.name, reworded)
        return [answer_of(first), answer_of(again)]

    first, again = asyncio.run(scenario())

    assert first.code == "SIDE_EFFECT_UNCERTAIN", first
    if declared:
        assert len(world.shim.calls(tool.name)) == 1 and not tool.applied(world)
        assert again.is_error and again.code == "IDEMPOTENCY_KEY_CONFLICT", again
    else:
        assert len(world.shim.calls(tool.name)) == 2 and tool.applied(world)
        assert not again.is_error, again


@pytest.mark.scale
def test_a_retry_after_a_crash_is_answered_once_the_dead_proxy_s_lease_lapses(
    live_server, ledger_token: str, tmp_path: Path
) -> None:
    """With the ledger's own lease (``LEDGER_LEASE_SECONDS``, 60 s by default) a killed proxy's
    call holds its record ``executing`` until the lease lapses: the restarted proxy's retry
    waits that long (its wait deadline, 60 s, outlasts a lease taken before the retry began)
    and is then answered ``SIDE_EFFECT_UNCERTAIN``, never ``IN_PROGRESS``."""
    (tool,) = [t for t in WRITE_TOOLS if t.id == "fs/write_file"]
    world = World(tmp_path, Shim(tmp_path))
    tool.prepare(world)
    proxy = Proxy(live_server, ledger_token, world, tool.server)

    (answer,) = asyncio.run(SHAPES["kill-restart"](proxy, tool))

    assert len(world.shim.calls(tool.name)) == 1 and not tool.applied(world)
    assert answer.protocol_error is None and answer.code == "SIDE_EFFECT_UNCERTAIN", answer
