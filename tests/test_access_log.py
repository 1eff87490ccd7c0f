"""The production web server's access log names each request by its path alone: a query
string holds idempotency keys (``GET /api/v1/records?key=...``, user and business ids) and
look-up tokens, and a console page's referrer its filters (``console/gunicorn_conf.py``)."""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests import processes
from tests.processes import ROOT, VENV_BIN, free_port

# The server writes into the test's database (an unauthenticated API request is a denial kept
# in the security log), from its own connection: the tables are emptied after the test.
pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

KEY = "agent:acme:ann.smith:run-1:create_order:cart-42"


@pytest.fixture
def server(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """gunicorn as docs/deploy.md's production command starts it, its access log in a file."""
    port, log = free_port(), tmp_path / "access.log"
    environ = {**os.environ, "DATABASE_URL": processes.test_database_url()}
    process = subprocess.Popen(
        [
            str(VENV_BIN / "gunicorn"),
            "--config",
            "python:console.gunicorn_conf",
            "console.wsgi:application",
            "--bind",
            f"127.0.0.1:{port}",
            "--workers",
            "1",
            "--access-logfile",
            str(log),
            "--no-control-socket",
        ],
        cwd=ROOT,
        env=environ,
        stdout=(tmp_path / "web.log").open("wb"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            web_log = (tmp_path / "web.log").read_text()[-3000:]
            assert process.poll() is None and time.monotonic() < deadline, web_log
            time.sleep(0.2)
        yield url, log
    finally:
        process.terminate()
        process.wait(timeout=20)


def _lines(log: Path, *paths: str) -> list[str]:
    """The access log's lines once a request to each of ``paths`` is in it (gunicorn writes
    each line after its answer is sent, and the start-up's health checks come before)."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        lines = log.read_text().splitlines()
        if all(any(f"GET {path} " in line for line in lines) for path in paths):
            break
        time.sleep(0.05)
    return lines


def test_the_access_log_keeps_no_query_string_nor_referrer(server) -> None:
    url, log = server
    key_lookup = httpx.get(f"{url}/api/v1/records", params={"key": KEY})
    assert key_lookup.status_code == 401
    with_referrer = httpx.get(
        f"{url}/login/",
        params={"access_token": "tok-31f9"},
        headers={"Referer": f"{url}/ledger/?key={KEY}"},
    )
    assert with_referrer.status_code == 200
    lines = _lines(log, "/api/v1/records", "/login/")
    assert any('"GET /api/v1/records HTTP/1.1" 401' in line for line in lines), lines
    assert any('"GET /login/ HTTP/1.1" 200' in line for line in lines), lines
    text = "\n".join(lines)
    assert "ann.smith" not in text and "tok-31f9" not in text and "?" not in text
