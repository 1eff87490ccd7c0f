"""A sandbox server running in a background thread of the test process (real sockets)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from sandbox.server import SandboxServer, serve

#: Seconds between a test server's checks for shutdown (``serve_forever``'s poll interval):
#: the default half second is what ``shutdown()`` waits, at the end of every test.
SHUTDOWN_POLL = 0.05


@pytest.fixture
def sandbox(tmp_path: Path) -> Iterator[SandboxServer]:
    server = serve("127.0.0.1", 0, tmp_path / "workspace")
    thread = threading.Thread(target=server.serve_forever, args=(SHUTDOWN_POLL,), daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


def arm(server: SandboxServer, **fault: object) -> None:
    response = httpx.post(f"{server.url}/_faults", json=fault, timeout=5)
    assert response.status_code == 201, response.text
