"""The processes a bench run starts (gunicorn, redis-server, the sandbox, Celery workers), and a
sampler of their resident memory. Every process is stopped by its own pid."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_for_port(port: int, process: subprocess.Popen[bytes], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"{process.args!r} exited with {process.returncode}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"nothing listens on port {port}")


class Service:
    """A child process in its own session, so it and its children stop together."""

    def __init__(self, name: str, args: list[str], logdir: Path, env: dict[str, str]) -> None:
        self.name = name
        self.log = logdir / f"{name}.log"
        self.process = subprocess.Popen(  # noqa: S603 - our own fixed commands
            args,
            cwd=ROOT,
            stdout=self.log.open("wb"),
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env=env,
        )

    @property
    def pid(self) -> int:
        return self.process.pid

    def stop(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(10)


def start_redis(logdir: Path) -> tuple[Service, str]:
    port = free_port()
    args = ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", ""]
    args += ["--appendonly", "no", "--dir", str(logdir)]
    service = Service("redis", args, logdir, dict(os.environ))
    wait_for_port(port, service.process)
    return service, f"redis://127.0.0.1:{port}/0"


def start_gunicorn(logdir: Path, env: dict[str, str], workers: int) -> tuple[Service, int]:
    """The production server: gunicorn sync workers (2 x cores + 1 by default)."""
    port = free_port()
    args = [str(BIN / "gunicorn"), "-c", "python:console.gunicorn_conf"]
    args += ["console.wsgi:application", "--bind", f"127.0.0.1:{port}"]
    args += ["--workers", str(workers), "--worker-class", "sync", "--backlog", "2048"]
    args += ["--timeout", "120", "--log-level", "warning"]
    service = Service("gunicorn", args, logdir, env)
    wait_for_port(port, service.process)
    return service, port


def start_sandbox(logdir: Path) -> tuple[Service, str]:
    port = free_port()
    args = [str(BIN / "python"), "-m", "sandbox", "--port", str(port)]
    args += ["--workspace", str(logdir / "workspace")]
    service = Service("sandbox", args, logdir, dict(os.environ))
    wait_for_port(port, service.process)
    return service, f"http://127.0.0.1:{port}"


def start_worker(name: str, logdir: Path, env: dict[str, str], concurrency: int) -> Service:
    """A reconciliation worker: one process, a thread pool (look-ups wait on the network), at
    Celery's default log level as in production (docs/deploy.md's command): no log line per task.
    Ready when it answers a remote-control ping."""
    from console.celery import app

    args = [str(BIN / "celery"), "-A", "console", "worker", "-Q", "reconcile", "-P", "threads"]
    args += ["-c", str(concurrency), "-n", f"{name}@%h", "--without-gossip", "--without-mingle"]
    service = Service(name, args, logdir, env)
    node = worker_node(service)
    deadline = time.monotonic() + 60
    while not app.control.ping(destination=[node], timeout=0.5):
        if service.process.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"worker {name} did not start: {service.log.read_text()[-2000:]}")
    return service


def worker_node(service: Service) -> str:
    """The Celery node name of a worker ``start_worker`` started (for remote control)."""
    return f"{service.name}@{socket.gethostname()}"


def rss_mb(pid: int) -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def children(pid: int) -> list[int]:
    try:
        text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    except OSError:
        return []
    return [int(p) for p in text.split()]


class MemorySampler:
    """Peak RSS per role ("web": each gunicorn worker, "worker": each Celery worker process)."""

    def __init__(self, interval: float = 0.25) -> None:
        self.interval = interval
        self.watch: dict[str, list[Service]] = {"web": [], "worker": []}
        self.peak: dict[str, float] = {"web": 0.0, "worker": 0.0}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """Stop sampling; a no-op when the run failed before sampling began, so the run's own
        error is the one reported."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(5)

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            for role, services in self.watch.items():
                for service in list(services):
                    pids = children(service.pid) if role == "web" else [service.pid]
                    pids += [c for p in pids for c in children(p)] if role == "worker" else []
                    for pid in pids:
                        self.peak[role] = max(self.peak[role], rss_mb(pid))
