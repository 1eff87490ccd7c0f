"""A live ledger server (Django's threaded live server) and a client for one tenant, once per
driver: the same tests run against ``LedgerClient`` and ``AsyncLedgerClient``; and
mcp-server-sqlite, for the tests that put the MCP proxy in front of it."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import threading
from collections.abc import Callable, Coroutine, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from agent_ledger_client import AsyncLedgerClient, AsyncRun, LedgerClient
from ledger.models import ApiToken, Tenant
from ledger.permissions import SERVICE_ACCOUNT_SCOPES
from tests.shared_builds import once_per_run


@pytest.fixture
def ledger_token(transactional_db) -> str:
    tenant = Tenant.objects.create(slug="acme", name="Acme")
    _token, plaintext = ApiToken.issue(
        tenant=tenant, name="runtime", scopes=sorted(SERVICE_ACCOUNT_SCOPES)
    )
    return plaintext


class BlockingRun:
    """An ``AsyncRun`` seen through blocking calls."""

    def __init__(self, owner: BlockingAsyncClient, run: AsyncRun) -> None:
        self.owner = owner
        self.run = run
        self.run_id = run.run_id
        self.data = run.data
        self.mirror = run.mirror

    def call(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
        return self.owner.wait(self.run.call(*args, **kwargs))

    def finish(self, termination_reason: str) -> dict[str, Any]:
        return self.owner.wait(self.run.finish(termination_reason))


class BlockingAsyncClient:
    """The asyncio driver on an event loop of its own, behind blocking calls, so a test
    written against ``LedgerClient`` drives ``AsyncLedgerClient`` too. Tool functions stay
    plain functions: the async driver runs them in a thread."""

    def __init__(self, url: str, token: str, **settings: Any) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.client = AsyncLedgerClient(url, token, **settings)
        self.protocol = self.client.protocol

    def wait(self, coroutine: Coroutine[Any, Any, Any]) -> Any:
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(timeout=120)

    def __getattr__(self, name: str) -> Callable[..., Any]:
        operation = getattr(self.client, name)
        return lambda *args, **kwargs: self.wait(operation(*args, **kwargs))

    def start_run(self, **start: Any) -> BlockingRun:
        return BlockingRun(self, self.wait(self.client.start_run(**start)))

    @contextmanager
    def run(self, **start: Any) -> Iterator[BlockingRun]:
        """The async client's own ``run()`` context, entered and left on its loop."""
        manager = self.client.run(**start)
        run = BlockingRun(self, self.wait(manager.__aenter__()))
        try:
            yield run
        except BaseException as exc:
            self.wait(manager.__aexit__(type(exc), exc, exc.__traceback__))
            raise
        self.wait(manager.__aexit__(None, None, None))

    def mirror(self, live: BlockingRun, agent: Callable[[BlockingRun], Any]) -> BlockingRun | None:
        """The async client's ``mirror``, its agent a blocking one run in a thread."""

        async def on_the_loop(shadow: AsyncRun) -> None:
            await asyncio.to_thread(agent, BlockingRun(self, shadow))

        shadow = self.wait(self.client.mirror(live.run, on_the_loop))
        return BlockingRun(self, shadow) if shadow is not None else None

    def close(self) -> None:
        self.wait(self.client.aclose())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)
        self.loop.close()


#: What the ``client`` fixture's clients are made with.
CLIENT_SETTINGS: dict[str, Any] = {"agent_id": "test-agent", "request_timeout": 10}


@pytest.fixture(params=["sync", "async"])
def client(request, live_server, ledger_token: str) -> Iterator[Any]:
    if request.param == "sync":
        with LedgerClient(live_server.url, ledger_token, **CLIENT_SETTINGS) as ledger:
            yield ledger
        return
    ledger = BlockingAsyncClient(live_server.url, ledger_token, **CLIENT_SETTINGS)
    try:
        yield ledger
    finally:
        ledger.close()


@pytest.fixture(scope="session")
def sqlite_server(tmp_path_factory: pytest.TempPathFactory, worker_id: str) -> Path:
    """mcp-server-sqlite in a virtual environment of its own, with the 1.x MCP SDK it is
    written for (it cannot import under the client's 2.x); made once a run and shared by the
    xdist workers (``shared_builds``)."""

    def build(venv: Path) -> None:
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        subprocess.run(
            [
                *(str(venv / "bin" / "pip"), "install", "--quiet", "--no-compile"),
                *("--disable-pip-version-check", "mcp-server-sqlite", "mcp<2"),
            ],
            check=True,
            capture_output=True,
            timeout=300,
        )

    venv = once_per_run(tmp_path_factory, worker_id, "mcp-server-sqlite", build)
    return venv / "bin" / "mcp-server-sqlite"
