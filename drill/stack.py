"""The stack a drill runs against, as separate processes: a fresh PostgreSQL database, a private
redis-server (so it can be killed and restarted), the sandbox downstreams, gunicorn with two
worker processes, two Celery workers and celery beat.

Every process is started in its own session (process group), so stopping it, or ``kill -9``
of it, takes its children too; ``Stack.stop`` stops everything it started, whatever happened.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import psycopg

from console.embedded import redis_server_executable

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent

#: Settings of the drill's own processes. Short leases and time limits make recovery happen
#: in seconds instead of minutes; everything else is the production default.
WEB_ENV = {
    "LEDGER_LEASE_SECONDS": "20",
}
WORKER_ENV = {
    "CELERY_VISIBILITY_TIMEOUT": "10",
    "RECONCILE_TASK_SOFT_TIME_LIMIT": "4",
    "RECONCILE_TASK_TIME_LIMIT": "6",
    "RECONCILE_CLAIM_SECONDS": "8",
    "RECONCILE_BASE_DELAY_SECONDS": "1",
    "RECONCILE_REQUEUE_SECONDS": "3",
    "ROLLOUT_EVALUATE_SECONDS": "2",
}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def port_open(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
    except OSError:
        return False
    return True


def wait_for(
    condition: Callable[[], object], *, timeout: float, what: str, step: float = 0.1
) -> None:
    """Poll ``condition()`` until it is true; raise naming ``what`` after ``timeout``."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(step)


@dataclass
class Process:
    """One started process (and its process group)."""

    name: str
    argv: list[str]
    log: Path
    env: dict[str, str]
    popen: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.log.parent.mkdir(parents=True, exist_ok=True)
        with self.log.open("ab") as out:
            self.popen = subprocess.Popen(  # noqa: S603 - argv is built here, not from input
                self.argv,
                cwd=ROOT,
                env=self.env,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )

    @property
    def pid(self) -> int:
        assert self.popen is not None
        return self.popen.pid

    def running(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def kill9(self) -> None:
        """SIGKILL the whole process group: no chance to clean up, like a crashed machine."""
        if self.popen is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.popen.pid, signal.SIGKILL)
        self.popen.wait(10)

    def stop(self, grace: float = 10.0) -> None:
        if self.popen is None:
            return
        if self.popen.poll() is None:
            try:
                os.killpg(self.popen.pid, signal.SIGTERM)
                self.popen.wait(grace)
            except ProcessLookupError:
                pass
            except subprocess.TimeoutExpired:
                self.kill9()
        # Children that outlived their parent (a pool process, say) go with the group.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.popen.pid, signal.SIGKILL)

    def log_tail(self, chars: int = 3000) -> str:
        try:
            return self.log.read_text(errors="replace")[-chars:]
        except OSError:
            return ""


def group_pids(pgid: int) -> list[int]:
    """Live processes in process group ``pgid`` (read from /proc)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # The command name is in parentheses and may contain spaces: split after it.
        fields = stat.rsplit(")", 1)[1].split()
        if fields[0] != "Z" and int(fields[2]) == pgid:
            pids.append(int(entry.name))
    return pids


def _established(port: int, *, local: bool) -> set[int]:
    """Socket inodes of established TCP connections whose local (or remote) port is ``port``."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            cols = line.split()
            address = cols[1] if local else cols[2]
            if cols[3] == "01" and int(address.rsplit(":", 1)[1], 16) == port:
                inodes.add(int(cols[9]))
    return inodes


def pids_connected(candidates: list[int], port: int, *, local: bool) -> list[int]:
    """Which of ``candidates`` hold an established connection on ``port`` (local or remote):
    the gunicorn worker serving a request, or the Celery process in the middle of a look-up."""
    inodes = _established(port, local=local)
    found = []
    for pid in candidates:
        try:
            fds = list(Path(f"/proc/{pid}/fd").iterdir())
        except OSError:
            continue
        for fd in fds:
            try:
                target = os.readlink(fd)
            except OSError:
                continue
            if target.startswith("socket:[") and int(target[8:-1]) in inodes:
                found.append(pid)
                break
    return found


@dataclass
class Stack:
    """Everything ``make drill`` runs against. ``start`` brings it up, ``stop`` takes it down."""

    workdir: Path
    # Its own database per run (dropped afterwards), so two checkouts can drill at once.
    database: str = field(default_factory=lambda: f"agent_ledger_drill_{os.getpid()}")
    pg_url: str = "postgres://postgres@127.0.0.1:5432"
    web_workers: int = 2
    processes: dict[str, Process] = field(default_factory=dict)
    # What else to take down with the stack (a drill's private database, say).
    on_stop: list[Callable[[], None]] = field(default_factory=list)
    redis_port: int = field(default_factory=free_port)
    web_port: int = field(default_factory=free_port)
    sandbox_port: int = field(default_factory=free_port)
    _worker_generation: int = 0

    # --- addresses ----------------------------------------------------------------------------
    @property
    def database_url(self) -> str:
        return f"{self.pg_url}/{self.database}"

    @property
    def broker_url(self) -> str:
        return f"redis://127.0.0.1:{self.redis_port}/0"

    @property
    def web_url(self) -> str:
        return f"http://127.0.0.1:{self.web_port}"

    @property
    def sandbox_url(self) -> str:
        return f"http://127.0.0.1:{self.sandbox_port}"

    @property
    def workspace(self) -> Path:
        return self.workdir / "workspace"

    @property
    def logs(self) -> Path:
        return self.workdir / "logs"

    def env(self, **extra: str) -> dict[str, str]:
        """The environment every process of the stack shares (docs/configuration.md)."""
        return {
            **os.environ,
            "DJANGO_SETTINGS_MODULE": "console.settings",
            "DATABASE_URL": self.database_url,
            "CELERY_BROKER_URL": self.broker_url,
            "SECRET_KEY": "drill-only-secret-key-not-for-production-0123456789abcdefghij",
            "DEBUG": "false",
            "SECURE_SSL_REDIRECT": "false",
            "ALLOWED_HOSTS": "127.0.0.1,localhost",
            "STATIC_MANIFEST": "false",
            "LOG_LEVEL": "WARNING",
            # The sandbox and the billing service listen on 127.0.0.1 (ledger/outbound.py).
            "LEDGER_OUTBOUND_ALLOW_PRIVATE": "true",
            "PYTHONUNBUFFERED": "1",
            **extra,
        }

    # --- lifecycle ----------------------------------------------------------------------------
    def start(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.workspace.mkdir(parents=True, exist_ok=True)
        self._fresh_database()
        self.start_redis()
        self._spawn(
            "sandbox",
            [
                sys.executable,
                "-m",
                "sandbox",
                "--port",
                str(self.sandbox_port),
                "--workspace",
                str(self.workspace),
            ],
        )
        self._spawn(
            "web",
            [
                str(BIN / "gunicorn"),
                "-c",
                "python:console.gunicorn_conf",
                "console.wsgi:application",
                "--bind",
                f"127.0.0.1:{self.web_port}",
                "--workers",
                str(self.web_workers),
                "--timeout",
                "30",
                "--graceful-timeout",
                "5",
                # The control socket's default path is shared by every gunicorn on the machine.
                "--no-control-socket",
            ],
            WEB_ENV,
        )
        for _ in range(2):
            self.start_worker()
        self._spawn(
            "beat",
            [
                str(BIN / "celery"),
                "-A",
                "console",
                "beat",
                "-s",
                str(self.workdir / "celerybeat-schedule"),
                "-l",
                "WARNING",
            ],
            WORKER_ENV,
        )
        wait_for(lambda: port_open(self.sandbox_port), timeout=20, what="the sandbox")
        wait_for(lambda: len(self.web_worker_pids()) >= self.web_workers, timeout=30, what="web")
        wait_for(lambda: port_open(self.web_port), timeout=30, what="gunicorn")
        for name in self.worker_names():
            self.wait_worker_ready(name)

    def stop(self) -> None:
        """Stop every process this stack started (workers first, the broker last)."""
        order = sorted(self.processes, key=lambda n: (n == "redis", n == "sandbox"))
        for name in order:
            self.processes[name].stop()
        for cleanup in self.on_stop:
            cleanup()
        with psycopg.connect(f"{self.pg_url}/postgres", autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{self.database}" WITH (FORCE)')

    def _spawn(self, name: str, argv: list[str], extra: dict[str, str] | None = None) -> Process:
        process = Process(name, argv, self.logs / f"{name}.log", self.env(**(extra or {})))
        self.processes[name] = process
        process.start()
        return process

    def _fresh_database(self) -> None:
        """Drop and create the drill's database, then migrate it (a fresh clone's state)."""
        with psycopg.connect(f"{self.pg_url}/postgres", autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{self.database}" WITH (FORCE)')
            conn.execute(f'CREATE DATABASE "{self.database}"')
        subprocess.run(
            [sys.executable, "manage.py", "migrate", "--noinput", "-v0"],
            cwd=ROOT,
            env=self.env(),
            check=True,
        )

    # --- Redis --------------------------------------------------------------------------------
    def start_redis(self) -> None:
        self._spawn(
            "redis",
            [
                redis_server_executable(),
                "--port",
                str(self.redis_port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                str(self.workdir),
            ],
        )
        wait_for(lambda: port_open(self.redis_port), timeout=15, what="redis-server")

    def kill_redis(self) -> None:
        self.processes["redis"].kill9()

    # --- Celery workers -----------------------------------------------------------------------
    def worker_names(self) -> list[str]:
        return [
            n for n in self.processes if n.startswith("worker-") and self.processes[n].running()
        ]

    def start_worker(self) -> str:
        """Start one more Celery worker (what a supervisor does after a crash)."""
        self._worker_generation += 1
        name = f"worker-{self._worker_generation}"
        self._spawn(
            name,
            [
                str(BIN / "celery"),
                "-A",
                "console",
                "worker",
                "-Q",
                "reconcile,maintenance,notify",
                "-c",
                "1",
                "-n",
                f"drill-{name}@%h",
                "--without-gossip",
                "--without-mingle",
                "-l",
                "INFO",
            ],
            WORKER_ENV,
        )
        return name

    def wait_worker_ready(self, name: str) -> None:
        process = self.processes[name]
        wait_for(
            lambda: b" ready." in process.log.read_bytes() or not process.running(),
            timeout=60,
            what=f"celery {name}",
        )
        if not process.running():
            raise RuntimeError(f"{name} died on start:\n{process.log_tail()}")

    def worker_in_lookup(self) -> str | None:
        """The worker whose process is talking to the sandbox right now (mid look-up)."""
        for name in self.worker_names():
            pids = group_pids(self.processes[name].pid)
            if pids_connected(pids, self.sandbox_port, local=False):
                return name
        return None

    # --- web ----------------------------------------------------------------------------------
    def web_worker_pids(self) -> list[int]:
        web = self.processes["web"]
        return [pid for pid in group_pids(web.pid) if pid != web.pid]

    def kill_pid(self, pid: int) -> None:
        """SIGKILL one process (a gunicorn worker: its master notices and starts another)."""
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)

    def web_workers_serving(self) -> list[int]:
        """gunicorn workers holding an accepted connection: the ones mid-request."""
        return pids_connected(self.web_worker_pids(), self.web_port, local=True)
