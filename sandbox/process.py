"""A downstream service as a real process of its own, so a test or a drill can kill it mid-request
and start it again on the same port and database."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import psycopg
from psycopg import sql

ROOT = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def fresh_database(server_url: str, name: str) -> str:
    """Drop and create database ``name`` on the PostgreSQL server at ``server_url`` (a URL
    without a database); returns the new database's URL."""
    with psycopg.connect(f"{server_url.rstrip('/')}/postgres", autocommit=True) as connection:
        connection.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
        )
        connection.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    return f"{server_url.rstrip('/')}/{name}"


def drop_database(server_url: str, name: str) -> None:
    with psycopg.connect(f"{server_url.rstrip('/')}/postgres", autocommit=True) as connection:
        connection.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
        )


class ServiceProcess:
    """``command`` serving HTTP on ``port``; up when ``GET <health_path>`` answers below 500."""

    def __init__(
        self,
        command: list[str],
        *,
        port: int,
        env: dict[str, str],
        log: Path,
        cwd: Path = ROOT,
        health_path: str = "/healthz",
    ) -> None:
        self.command = command
        self.cwd = cwd
        self.health_path = health_path
        self.port = port
        self.env = env
        self.log = log
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def healthy(self) -> bool:
        try:
            return httpx.get(f"{self.url}{self.health_path}", timeout=1).status_code < 500
        except httpx.HTTPError:
            return False

    def ensure_running(self, timeout: float = 30) -> None:
        """Start the process if it is not running (a fault hook may have ended it, perhaps
        only while this waits), and wait until it answers."""
        started = False
        deadline = time.monotonic() + timeout
        while not self.healthy():
            exited = self.process is None or self.process.poll() is not None
            if (exited and started) or time.monotonic() > deadline:
                raise RuntimeError(
                    f"{self.command[:3]} did not start:\n{self.log.read_text()[-3000:]}"
                )
            if exited:
                self.process = subprocess.Popen(  # noqa: S603 - our own command line
                    self.command,
                    cwd=self.cwd,
                    env={**os.environ, **self.env},
                    stdout=self.log.open("ab"),
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
                started = True
            time.sleep(0.1)

    def wait_exited(self, timeout: float = 10) -> int:
        assert self.process is not None
        return self.process.wait(timeout)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)
        self.process = None


def invoices_service(
    database_url: str, *, token: str, log: Path, faults: bool = False
) -> ServiceProcess:
    """The sandbox billing service (sandbox/invoices.py) on a free port; not started yet."""
    port = free_port()
    return ServiceProcess(
        [
            sys.executable,
            "-m",
            "sandbox.invoices",
            "--port",
            str(port),
            "--database-url",
            database_url,
        ],
        port=port,
        env={"INVOICES_LOOKUP_TOKEN": token, "INVOICES_FAULTS": "1" if faults else "0"},
        log=log,
    )
