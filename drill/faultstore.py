"""A second, private database for the drills that break the database itself: an embedded
PostgreSQL under the drill's folder (the same wheel ``make run`` uses), which the drills kill
with SIGKILL, restart, make read-only and starve of connections, or any database a drill made
(a private cluster of ``drill.clusters``, given by its URL), and web processes serving it, one
of them per clock skew (libfaketime, so only that process's clock moves, not the machine's).
The shared server the rest of the stack uses is never touched.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psycopg

from drill.stack import BIN, ROOT, Process, Stack, free_port, port_open, wait_for


def _libfaketime() -> Path:
    """Debian's libfaketime (package ``faketime``, which .ci/run installs) for this machine."""
    found = sorted(Path("/usr/lib").glob("*/faketime/libfaketime.so.1"))
    if not found:
        raise RuntimeError("the clock-skew drill needs libfaketime: apt-get install faketime")
    return found[0]


# The drills' lease: short, so a lapse judged on time (or not) shows within the drill.
LEASE_SECONDS = 20


@dataclass
class FaultStore:
    stack: Stack
    pgdata: Path = field(init=False)
    webs: dict[str, int] = field(default_factory=dict)  # name -> port
    token: str = ""
    url: str = ""
    ready: bool = False
    #: Whether the database is the embedded one ``start_database`` starts (and ``stop`` stops).
    embedded: bool = True

    def __post_init__(self) -> None:
        self.pgdata = self.stack.workdir / "pg-faults"

    # --- the database -------------------------------------------------------------------------
    def start_database(self) -> None:
        from console import embedded

        if self.pgdata.exists():  # left by an interrupted run
            embedded.stop(self.pgdata)
            shutil.rmtree(self.pgdata)
        self.url = embedded.url(self.pgdata)

    def restart_database(self) -> None:
        from console import embedded

        embedded.url(self.pgdata)  # starts it again, as a supervisor would

    def postmaster_pid(self) -> int | None:
        try:
            return int((self.pgdata / "postmaster.pid").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return None

    def kill_database(self) -> None:
        """SIGKILL the postmaster and every backend: a crashed database server."""
        pid = self.postmaster_pid()
        if pid is None:
            return
        children = _children(pid)
        for victim in [pid, *children]:
            with contextlib.suppress(ProcessLookupError):
                os.kill(victim, signal.SIGKILL)
        wait_for(lambda: not _alive(pid), timeout=10, what="the killed postmaster to go")

    def admin(self) -> psycopg.Connection[Any]:
        return psycopg.connect(self.url.replace("postgres://", "postgresql://"), autocommit=True)

    def set_read_only(self, on: bool) -> None:
        with self.admin() as conn:
            conn.execute(
                f"ALTER SYSTEM SET default_transaction_read_only = {'on' if on else 'off'}"
            )
            conn.execute("SELECT pg_reload_conf()")

    # --- the web processes --------------------------------------------------------------------
    def env(self, **extra: str) -> dict[str, str]:
        return self.stack.env(
            **{"DATABASE_URL": self.url, "LEDGER_LEASE_SECONDS": str(LEASE_SECONDS), **extra}
        )

    def prepare(self) -> None:
        """Migrate the private database and give the drill a tenant and a token there."""
        subprocess.run(
            [sys.executable, "manage.py", "migrate", "--noinput", "-v0"],
            cwd=ROOT,
            env=self.env(),
            check=True,
        )
        done = subprocess.run(  # noqa: S603 - our own argv
            [sys.executable, "manage.py", "shell", "-c", _SETUP],
            cwd=ROOT,
            env=self.env(),
            check=True,
            capture_output=True,
            text=True,
        )
        self.token = done.stdout.strip().splitlines()[-1]

    def start_web(
        self,
        name: str,
        *,
        skew: str = "",
        workers: int = 3,
        timeout: int = 60,
        env: dict[str, str] | None = None,
    ) -> str:
        """A gunicorn serving the private database; with ``skew`` (``+1h``, ``-1h``) its
        clock, and only its clock, is that far off; ``timeout`` is gunicorn's worker timeout,
        ``env`` more of the environment (another ``DATABASE_URL``, say). Each request's path,
        status and time in microseconds, as gunicorn measured it, is logged to
        ``<name>-access.log`` (``server_times``)."""
        port = free_port()
        extra = dict(env or {})
        if skew:
            extra.update(LD_PRELOAD=str(_libfaketime()), FAKETIME=skew, FAKETIME_NO_CACHE="1")
        process = Process(
            name,
            [
                str(BIN / "gunicorn"),
                "-c",
                "python:console.gunicorn_conf",
                "console.wsgi:application",
                "--bind",
                f"127.0.0.1:{port}",
                "--workers",
                str(workers),
                "--timeout",
                str(timeout),
                "--no-control-socket",
                "--access-logfile",
                str(self.stack.logs / f"{name}-access.log"),
                "--access-logformat",
                "%(U)s %(s)s %(D)s",
            ],
            self.stack.logs / f"{name}.log",
            self.env(**extra),
        )
        self.stack.processes[name] = process
        process.start()
        wait_for(lambda: port_open(port), timeout=30, what=name)
        self.webs[name] = port
        wait_for(lambda: self._answers(name), timeout=60, what=f"{name} to answer", step=0.5)
        return f"http://127.0.0.1:{port}"

    def _answers(self, name: str) -> bool:
        try:
            return httpx.get(self.url_of(name) + "/healthz", timeout=10).status_code == 200
        except httpx.HTTPError:
            return False

    def server_times(self, name: str) -> list[tuple[str, int, float]]:
        """Every request ``name`` answered: path, status and seconds, as gunicorn timed it."""
        times = []
        log = self.stack.logs / f"{name}-access.log"
        for line in log.read_text().splitlines() if log.exists() else []:
            path, status, micros = line.rsplit(" ", 2)
            times.append((path, int(status), int(micros) / 1e6))
        return times

    def url_of(self, name: str) -> str:
        return f"http://127.0.0.1:{self.webs[name]}"

    def api(self, name: str, *, timeout: float = 20) -> httpx.Client:
        return httpx.Client(
            base_url=f"{self.url_of(name)}/api/v1",
            headers={"Authorization": f"Bearer {self.token}"},
            timeout=timeout,
        )

    def stop(self) -> None:
        from console import embedded

        for name in list(self.webs):
            self.stack.processes[name].stop()
        if self.embedded:
            with contextlib.suppress(Exception):
                embedded.stop(self.pgdata)


def _children(pid: int) -> list[int]:
    """The processes whose parent is ``pid`` (PostgreSQL's backends, for the postmaster)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid:
                found.append(int(entry.name))
    return found


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


_SETUP = """
from ledger.models import ApiToken, Tenant
from ledger.services.registry import register_tool
tenant = Tenant.objects.create(slug="faults", name="Faults Co")
register_tool(tenant=tenant, name="create_order", actor="drill", source="cli")
_, token = ApiToken.issue(tenant=tenant, name="fault-drills")
print(token)
"""


def wait_until(condition: Any, *, timeout: float, step: float = 0.2) -> float | None:
    """Seconds until ``condition()`` held, or None if it did not within ``timeout``."""
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        if condition():
            return time.monotonic() - started
        time.sleep(step)
    return None
