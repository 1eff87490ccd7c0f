"""The client against a ledger whose store is down: a stand-in HTTP service answers every
request ``503`` problem+json with ``Retry-After``, as the contract has the server do. Both
drivers back off as told, say their remaining patience on every request, and fail closed."""

from __future__ import annotations

import itertools
import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from agent_ledger_client import LedgerClient
from tests.client.conftest import BlockingAsyncClient
from tests.sandbox_fixtures import SHUTDOWN_POLL


class StoreDown(BaseHTTPRequestHandler):
    seen: list[tuple[float, str, str | None]] = []

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        self.rfile.read(length)
        StoreDown.seen.append((time.monotonic(), self.path, self.headers["X-Ledger-Timeout-Ms"]))
        body = json.dumps({"code": "LEDGER_STORE_UNAVAILABLE", "detail": "store down"}).encode()
        self.send_response(503)
        self.send_header("Content-Type", "application/problem+json")
        self.send_header("Retry-After", "1")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        return


@pytest.fixture
def store_down() -> Iterator[str]:
    StoreDown.seen = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), StoreDown)
    thread = threading.Thread(target=server.serve_forever, args=(SHUTDOWN_POLL,), daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@pytest.mark.parametrize("driver", ["sync", "async"])
def test_store_trouble_backs_off_as_told_then_fails_closed(store_down: str, driver: str) -> None:
    settings: dict[str, Any] = {"request_timeout": 2.0, "ledger_budget": 3.5}
    ledger: Any = (
        LedgerClient(store_down, "al_x", **settings)
        if driver == "sync"
        else BlockingAsyncClient(store_down, "al_x", **settings)
    )
    executed: list[str] = []
    try:
        observation = ledger.call(
            "r-1", "charge_customer", {"amount": 5}, execute=lambda ctx: executed.append("x")
        )
    finally:
        ledger.close()
    assert executed == []
    assert observation["code"] == "LEDGER_UNAVAILABLE"
    times = [at for at, _path, _budget in StoreDown.seen]
    assert len(times) >= 3
    assert all(later - earlier >= 1.0 for earlier, later in itertools.pairwise(times))
    budgets = [int(budget or 0) for _at, _path, budget in StoreDown.seen]
    assert budgets[0] == 2000 and all(0 < b <= 2000 for b in budgets)
