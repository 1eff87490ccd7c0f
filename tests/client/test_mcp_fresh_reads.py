"""Reads stay fresh through ``agent-ledger-mcp``: a read asked again after the data changed
returns the new data, because a read is keyed by its step (a new call, a new read). Each case
reads, changes the data through the proxy's own write tool, and reads again, against the real
server.

``read_query`` with a ``SELECT`` is a read on every call (the SQL classifier), whatever the
server's trust. ``git_log`` and ``open_nodes`` have words that also write (``log``, ``open``):
the ledger knows them as reads of the reference servers by the name each server gives itself
(``ledger.classification.mcp_servers``), so the default, untrusted proxy reads them again. The
other ways that make a tool a read are tested too: trusting the server (its ``readOnlyHint``
is believed), a manager's override, an org policy rule (docs/integrations.md "Retries and
fresh reads"). An ambiguous read of a server the ledger does not know stays one action per
arguments in its run (tests/classification/test_mcp_servers.py, tests/test_registry.py)."""

from __future__ import annotations

import asyncio
import json
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from ledger.domain import Idempotency
from ledger.models import PolicyRule, Tenant, Tool
from ledger.services.registry import override_tool
from tests.client.mcp_effects import ADA, World, git_output, sql
from tests.client.mcp_retries import Answer, Proxy, answer_of
from tests.client.test_mcp_guard_servers import Shim

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("npx") is None, reason="the official servers need Node (npx)"),
]


@dataclass(frozen=True)
class Read:
    """A read tool, how to prepare its data, the write (through the proxy) that changes it,
    and the text the read shows only after the change."""

    server: str
    name: str
    arguments: Callable[[World], dict[str, Any]]
    prepare: Callable[[World], object]
    write: tuple[str, Callable[[World], dict[str, Any]]]
    changed: str


def _repository(world: World) -> None:
    repo = world.repo
    repo.mkdir()
    for args in (
        ["init", "-q", "-b", "main"],
        ["config", "user.email", "a@example.com"],
        ["config", "user.name", "Agent"],
    ):
        git_output(repo, *args)
    (repo / "README.md").write_text("hello\n")
    git_output(repo, "add", "README.md")
    git_output(repo, "commit", "-q", "-m", "first")
    (repo / "added.txt").write_text("added\n")
    git_output(repo, "add", "added.txt")


READS = {
    "git_log": Read(
        "git",
        "git_log",
        lambda w: {"repo_path": str(w.repo), "max_count": 5},
        _repository,
        ("git_commit", lambda w: {"repo_path": str(w.repo), "message": "second commit"}),
        "second commit",
    ),
    "open_nodes": Read(
        "memory",
        "open_nodes",
        lambda w: {"names": ["Ada"]},
        lambda w: w.graph.write_text(json.dumps(ADA) + "\n"),
        (
            "add_observations",
            lambda w: {"observations": [{"entityName": "Ada", "contents": ["likes tea"]}]},
        ),
        "likes tea",
    ),
    "read_query": Read(
        "sqlite",
        "read_query",
        lambda w: {"query": "SELECT cart FROM orders"},
        lambda w: sql(w, "CREATE TABLE orders (id INTEGER PRIMARY KEY, cart TEXT)"),
        ("write_query", lambda w: {"query": "INSERT INTO orders (cart) VALUES ('cart-42')"}),
        "cart-42",
    ),
}


def _read_twice(proxy: Proxy, read: Read) -> tuple[Answer, Answer, Answer]:
    """Read, write through the proxy, read again with the same arguments."""
    world = proxy.world

    async def scenario() -> tuple[Answer, Answer, Answer]:
        async with proxy.stdio() as session:
            first = await session.call_tool(read.name, read.arguments(world))
            tool, arguments = read.write
            wrote = await session.call_tool(tool, arguments(world))
            again = await session.call_tool(read.name, read.arguments(world))
        return answer_of(first), answer_of(wrote), answer_of(again)

    return asyncio.run(scenario())


def _imported(proxy: Proxy) -> None:
    """The proxy started once: the server's tools are in the registry, as a manager finds
    them on the console's Tools page."""

    async def started() -> None:
        async with proxy.stdio() as session:
            await session.list_tools()

    asyncio.run(started())


@pytest.fixture
def world(tmp_path: Path, request: pytest.FixtureRequest) -> World:
    read = READS[request.node.callspec.params["read"]]
    sqlite = request.getfixturevalue("sqlite_server") if read.server == "sqlite" else None
    made = World(tmp_path, Shim(tmp_path), sqlite)
    read.prepare(made)
    return made


def _override(server: str, name: str) -> None:
    """A manager's override, as the console's Tools page sets it (audited, with a reason)."""
    tool = Tool.objects.get(name=f"{server}/{name}")
    override_tool(
        tool=tool,
        idempotency=Idempotency.IDEMPOTENT,
        reason="only reads: the server's listing says readOnlyHint",
        actor="manager@example.com",
        source="console",
    )


#: `make test` takes each server and each way once; `make drill` (marker `scale`) the rest.
EACH_ONCE = {
    ("read_query", "untrusted"),
    ("git_log", "trusted"),
    ("git_log", "policy"),
    ("open_nodes", "override"),
}
READ_WAYS = [
    ("read_query", "untrusted"),
    ("git_log", "untrusted"),
    ("open_nodes", "untrusted"),
    ("git_log", "trusted"),
    ("git_log", "override"),
    ("git_log", "policy"),
    ("open_nodes", "trusted"),
    ("open_nodes", "override"),
]


@pytest.mark.parametrize(
    ("read", "way"),
    [
        pytest.param(read, way, marks=() if (read, way) in EACH_ONCE else pytest.mark.scale)
        for read, way in READ_WAYS
    ],
)
def test_a_read_asked_again_after_the_data_changed_returns_the_new_data(
    read: str, way: str, world: World, live_server, ledger_token: str
) -> None:
    subject = READS[read]
    extra = ("--trust", "trusted") if way == "trusted" else ()
    if way == "policy":
        PolicyRule.objects.create(
            tenant=Tenant.objects.get(),
            pattern=f"{subject.server}/{subject.name}",
            idempotency="idempotent",
            reason="the git server's log only reads",
        )
    proxy = Proxy(live_server, ledger_token, world, subject.server, extra)
    if way == "override":
        _imported(proxy)
        _override(subject.server, subject.name)

    first, wrote, again = _read_twice(proxy, subject)

    assert not first.is_error and subject.changed not in first.text, first
    assert not wrote.is_error, wrote
    assert not again.is_error and subject.changed in again.text, again
    assert len(world.shim.calls(subject.name)) == 2  # the server read twice
