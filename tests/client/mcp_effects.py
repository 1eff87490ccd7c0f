"""The write tools of the official MCP servers, each with the real state it acts on.

For every write tool of the filesystem and memory servers (npx), mcp-server-git and
mcp-server-sqlite (PyPI), a ``WriteTool`` says how to prepare the state for one call, the
call's arguments, whether the call's effect shows in that state (files on disk, the memory
server's graph file, the git repository, the sqlite rows) and how to undo it by hand.

Undoing is what makes a second execution visible: many of these tools leave the same state
when run twice (``create_directory`` is mkdir -p, the memory server skips an entity it has,
``git_checkout`` to the branch it is on changes nothing), so a test observes the effect once,
undoes it, and a retry that ran the tool again would bring it back. The exception is
``append_insight``, whose memo lives in the sqlite server's memory: its effect is counted by
the server's own announcements of each change (``notifications/resources/updated``), which
the shim logs, and exactly one must have been made.
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
from collections.abc import Callable
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.client.test_mcp_guard_servers import FILESYSTEM, Shim, memory_server
from tests.client.test_mcp_proxy import GIT

#: The resource mcp-server-sqlite's ``append_insight`` changes, as it announces it.
INSIGHTS = "memo://insights"


@dataclass(frozen=True)
class World:
    """A test's folder: a file root, the memory server's graph, a git repository and an
    sqlite database, each made by the ``prepare`` of the tool under test; and the shim."""

    folder: Path
    shim: Shim
    sqlite_server: Path | None = None

    @property
    def root(self) -> Path:
        return self.folder / "files"

    @property
    def graph(self) -> Path:
        """Where ``memory_server(folder)`` keeps its graph."""
        return self.folder / "memory.jsonl"

    @property
    def repo(self) -> Path:
        return self.folder / "repo"

    @property
    def database(self) -> Path:
        return self.folder / "shop.db"

    def upstream(self, server: str) -> list[str]:
        """The command of ``server`` on this world's state."""
        if server == "fs":
            return [*FILESYSTEM, str(self.root)]
        if server == "memory":
            return memory_server(self.folder)
        if server == "git":
            return [*GIT, "--repository", str(self.repo)]
        assert server == "sqlite" and self.sqlite_server is not None
        return [str(self.sqlite_server), "--db-path", str(self.database)]


@dataclass(frozen=True)
class WriteTool:
    server: str
    name: str
    arguments: Callable[[World], dict[str, Any]]
    prepare: Callable[[World], object]
    #: Whether the call's effect is in the state.
    applied: Callable[[World], bool]
    #: Puts the state back as ``prepare`` left it; None when it cannot be undone by hand.
    undo: Callable[[World], object] | None

    @property
    def id(self) -> str:
        return f"{self.server}/{self.name}"


# --- the filesystem server -------------------------------------------------------------------
def _files(world: World) -> None:
    world.root.mkdir()
    (world.root / "notes.txt").write_text("old\n")
    (world.root / "draft.txt").write_text("move me\n")


def _moved(world: World) -> bool:
    return (world.root / "moved.txt").exists() and not (world.root / "draft.txt").exists()


FILESYSTEM_TOOLS = [
    WriteTool(
        "fs",
        "write_file",
        lambda w: {"path": str(w.root / "new.txt"), "content": "new\n"},
        _files,
        lambda w: (w.root / "new.txt").is_file() and (w.root / "new.txt").read_text() == "new\n",
        lambda w: (w.root / "new.txt").unlink(),
    ),
    WriteTool(
        "fs",
        "edit_file",
        lambda w: {
            "path": str(w.root / "notes.txt"),
            "edits": [{"oldText": "old", "newText": "edited"}],
        },
        _files,
        lambda w: (w.root / "notes.txt").read_text() == "edited\n",
        lambda w: (w.root / "notes.txt").write_text("old\n"),
    ),
    WriteTool(
        "fs",
        "create_directory",
        lambda w: {"path": str(w.root / "made")},
        _files,
        lambda w: (w.root / "made").is_dir(),
        lambda w: (w.root / "made").rmdir(),
    ),
    WriteTool(
        "fs",
        "move_file",
        lambda w: {"source": str(w.root / "draft.txt"), "destination": str(w.root / "moved.txt")},
        _files,
        _moved,
        lambda w: (w.root / "moved.txt").rename(w.root / "draft.txt"),
    ),
]


# --- the memory server -----------------------------------------------------------------------
ADA = {"type": "entity", "name": "Ada", "entityType": "person", "observations": ["x", "y"]}
KNOWS = {"type": "relation", "from": "Ada", "to": "Ada", "relationType": "knows"}


def _graph(world: World) -> list[dict[str, Any]]:
    if not world.graph.exists():
        return []
    return [json.loads(line) for line in world.graph.read_text().splitlines() if line.strip()]


def _write_graph(world: World, *items: dict[str, Any]) -> None:
    world.graph.write_text("\n".join(json.dumps(item) for item in items))


def _entity(world: World) -> dict[str, Any] | None:
    return next((item for item in _graph(world) if item.get("name") == "Ada"), None)


def _observations(world: World) -> list[str]:
    entity = _entity(world)
    return list(entity["observations"]) if entity else []


def _knows(world: World) -> bool:
    return any(item.get("relationType") == "knows" for item in _graph(world))


def _memory(*items: dict[str, Any]) -> Callable[[World], None]:
    """Prepares (and undoes to) a graph of ``items``."""
    return lambda world: _write_graph(world, *items)


MEMORY_TOOLS = [
    WriteTool(
        "memory",
        "create_entities",
        lambda w: {"entities": [{"name": "Ada", "entityType": "person", "observations": ["x"]}]},
        _memory(),
        lambda w: _entity(w) is not None,
        _memory(),
    ),
    WriteTool(
        "memory",
        "create_relations",
        lambda w: {"relations": [{k: v for k, v in KNOWS.items() if k != "type"}]},
        _memory(ADA),
        _knows,
        _memory(ADA),
    ),
    WriteTool(
        "memory",
        "add_observations",
        lambda w: {"observations": [{"entityName": "Ada", "contents": ["likes tea"]}]},
        _memory(ADA),
        lambda w: "likes tea" in _observations(w),
        _memory(ADA),
    ),
    WriteTool(
        "memory",
        "delete_entities",
        lambda w: {"entityNames": ["Ada"]},
        _memory(ADA),
        lambda w: _entity(w) is None,
        _memory(ADA),
    ),
    WriteTool(
        "memory",
        "delete_observations",
        lambda w: {"deletions": [{"entityName": "Ada", "observations": ["x"]}]},
        _memory(ADA),
        lambda w: _observations(w) == ["y"],
        _memory(ADA),
    ),
    WriteTool(
        "memory",
        "delete_relations",
        lambda w: {"relations": [{k: v for k, v in KNOWS.items() if k != "type"}]},
        _memory(ADA, KNOWS),
        lambda w: _entity(w) is not None and not _knows(w),
        _memory(ADA, KNOWS),
    ),
]


# --- mcp-server-git --------------------------------------------------------------------------
def git_output(repo: Path, *args: str) -> str:
    done = subprocess.run(
        ["git", "-C", str(repo), *args], check=True, capture_output=True, text=True
    )
    return done.stdout


def _repository(world: World, *, staged: bool = False, branch: bool = False) -> None:
    """A repository with one commit on ``main`` and an untracked ``added.txt`` (staged, and
    a branch ``feature``, when asked)."""
    repo = world.repo
    repo.mkdir()
    git_output(repo, "init", "-q", "-b", "main")
    git_output(repo, "config", "user.email", "a@example.com")
    git_output(repo, "config", "user.name", "Agent")
    (repo / "README.md").write_text("hello\n")
    git_output(repo, "add", "README.md")
    git_output(repo, "commit", "-q", "-m", "first")
    (repo / "added.txt").write_text("added\n")
    if staged:
        git_output(repo, "add", "added.txt")
    if branch:
        git_output(repo, "branch", "feature")


def _staged(world: World) -> list[str]:
    return git_output(world.repo, "diff", "--cached", "--name-only").split()


def _at(world: World) -> dict[str, Any]:
    return {"repo_path": str(world.repo)}


GIT_TOOLS = [
    WriteTool(
        "git",
        "git_add",
        lambda w: {**_at(w), "files": ["added.txt"]},
        _repository,
        lambda w: _staged(w) == ["added.txt"],
        lambda w: git_output(w.repo, "reset", "-q", "--", "added.txt"),
    ),
    WriteTool(
        "git",
        "git_commit",
        lambda w: {**_at(w), "message": "agent commit"},
        lambda w: _repository(w, staged=True),
        lambda w: git_output(w.repo, "log", "--format=%s").splitlines()[0] == "agent commit",
        lambda w: git_output(w.repo, "reset", "-q", "--soft", "HEAD~1"),
    ),
    WriteTool(
        "git",
        "git_create_branch",
        lambda w: {**_at(w), "branch_name": "feature"},
        _repository,
        lambda w: "feature" in git_output(w.repo, "branch", "--format=%(refname:short)").split(),
        lambda w: git_output(w.repo, "branch", "-q", "-D", "feature"),
    ),
    WriteTool(
        "git",
        "git_checkout",
        lambda w: {**_at(w), "branch_name": "feature"},
        lambda w: _repository(w, branch=True),
        lambda w: git_output(w.repo, "branch", "--show-current").strip() == "feature",
        lambda w: git_output(w.repo, "checkout", "-q", "main"),
    ),
    WriteTool(
        "git",
        "git_reset",
        _at,
        lambda w: _repository(w, staged=True),
        lambda w: _staged(w) == [],
        lambda w: git_output(w.repo, "add", "added.txt"),
    ),
]


# --- mcp-server-sqlite -----------------------------------------------------------------------
def sql(world: World, statement: str) -> list[tuple[Any, ...]]:
    """``statement`` on the world's database, committed; its rows."""
    with closing(sqlite3.connect(world.database)) as database, database:
        return database.execute(statement).fetchall()


def _orders(world: World) -> None:
    sql(world, "CREATE TABLE orders (id INTEGER PRIMARY KEY, cart TEXT)")


def _insights(world: World) -> int:
    notes = world.shim.notifications("notifications/resources/updated")
    return sum(1 for note in notes if note.get("params", {}).get("uri") == INSIGHTS)


SQLITE_TOOLS = [
    WriteTool(
        "sqlite",
        "write_query",
        lambda w: {"query": "INSERT INTO orders (cart) VALUES ('cart-42')"},
        _orders,
        lambda w: sql(w, "SELECT count(*) FROM orders WHERE cart = 'cart-42'") == [(1,)],
        lambda w: sql(w, "DELETE FROM orders"),
    ),
    WriteTool(
        "sqlite",
        "create_table",
        lambda w: {"query": "CREATE TABLE notes (id INTEGER PRIMARY KEY, body TEXT)"},
        _orders,
        lambda w: sql(w, "SELECT name FROM sqlite_master WHERE name = 'notes'") == [("notes",)],
        lambda w: sql(w, "DROP TABLE notes"),
    ),
    WriteTool(
        "sqlite",
        "append_insight",
        lambda w: {"insight": "Carts peak on Mondays"},
        _orders,
        lambda w: _insights(w) == 1,
        None,
    ),
]

WRITE_TOOLS = [*FILESYSTEM_TOOLS, *MEMORY_TOOLS, *GIT_TOOLS, *SQLITE_TOOLS]
