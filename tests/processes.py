"""Real processes for tests: Celery workers and a private Redis server."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import quote

from django.db import connection

from console.embedded import redis_server_executable

ROOT = Path(__file__).resolve().parents[1]
VENV_BIN = Path(os.environ.get("VIRTUAL_ENV", ROOT / ".venv")) / "bin"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def server_url(db: Mapping[str, Any]) -> str:
    """``postgres://user@host:port`` of the server in Django's database settings ``db``; a
    Unix socket's folder (the embedded PostgreSQL) is the host percent-encoded, as libpq and
    django-environ read it."""
    host = db["HOST"]
    if host.startswith("/"):
        return f"postgres://{db['USER']}@{quote(host, safe='')}"
    return f"postgres://{db['USER']}@{host}:{db['PORT']}"


def test_database_url() -> str:
    """The database the test run uses (pytest-django's test_ database), as a URL."""
    return f"{server_url(connection.settings_dict)}/{connection.settings_dict['NAME']}"


class RedisServer:
    """A redis-server of the test's own on a free port, so it can be stopped and started."""

    def __init__(self, workdir: Path) -> None:
        self.port = free_port()
        self.workdir = workdir
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        self.process = subprocess.Popen(
            [
                redis_server_executable(),
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                str(self.workdir),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
                return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError("redis-server did not start")

    def stop(self) -> None:
        if self.process is not None:
            self.process.kill()
            self.process.wait(10)
            self.process = None


@contextmanager
def redis_server(workdir: Path) -> Iterator[RedisServer]:
    server = RedisServer(workdir)
    server.start()
    try:
        yield server
    finally:
        server.stop()


class Worker:
    def __init__(self, name: str, log: Path, process: subprocess.Popen[bytes]) -> None:
        self.name = name
        self.log = log
        self.process = process

    def kill9(self) -> None:
        """SIGKILL the worker and its pool children, mid-task, with no chance to clean up."""
        os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(10)

    def stop(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(15)
            except subprocess.TimeoutExpired:
                self.kill9()


@contextmanager
def celery_worker(
    name: str,
    broker_url: str,
    logdir: Path,
    *,
    queues: str = "reconcile",
    env: dict[str, str] | None = None,
) -> Iterator[Worker]:
    """A real ``celery worker`` process on the test database, ready when this yields. Its
    outbound requests may go to private addresses: the tests' downstreams listen on 127.0.0.1."""
    log = logdir / f"{name}.log"
    process = subprocess.Popen(
        [
            str(VENV_BIN / "celery"),
            "-A",
            "console",
            "worker",
            "-Q",
            queues,
            "-c",
            "1",
            "-n",
            f"{name}@%h",
            "--without-gossip",
            "--without-mingle",
            "-l",
            "INFO",
        ],
        cwd=ROOT,
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
        env={
            **os.environ,
            "DATABASE_URL": test_database_url(),
            "CELERY_BROKER_URL": broker_url,
            "LEDGER_OUTBOUND_ALLOW_PRIVATE": "true",
            **(env or {}),
        },
    )
    worker = Worker(name, log, process)
    try:
        deadline = time.monotonic() + 60
        while b" ready." not in log.read_bytes():
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"worker {name} did not start:\n{log.read_text()[-3000:]}")
            time.sleep(0.2)
        yield worker
    finally:
        worker.stop()
