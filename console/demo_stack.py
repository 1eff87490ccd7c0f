"""``python -m console.demo_stack``: the live demo of ``make run``, one command for all of it.

It prepares the database (``migrate``, ``seed_demo``), then runs the sandbox downstreams, the
web server and a reconciliation worker with beat, and the demo agent once the sandbox answers
(``demo_agent --if-empty``). Every line a process prints is prefixed with its name. Ctrl-C (or
SIGTERM) stops them all; so does any of the long-running ones exiting.

A small supervisor rather than a Procfile runner such as honcho: honcho stops everything when
any process exits, and the demo agent is a step that ends, started only after the sandbox is
up. The broker is kombu's file-system transport (``var/broker``), so the demo needs no Redis.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from types import FrameType

import django
import httpx
from django.conf import settings

ROOT = Path(__file__).resolve().parent.parent
#: The worker of ``make worker``: every queue (look-ups, the sweeps, on-call deliveries), two
#: processes (the demo's look-ups are few).
WORKER_OPTIONS = ["-Q", "reconcile,maintenance,notify", "-c", "2", "-l", "INFO"]
#: How long a process gets to stop after SIGTERM before it is killed.
STOP_TIMEOUT_SECONDS = 10.0


@dataclass
class Child:
    name: str
    process: subprocess.Popen[str]


class Stack:
    """The processes started so far, each in a process group of its own (a worker's pool, the
    web server's threads), so stopping one stops all it started."""

    def __init__(self, env: dict[str, str]) -> None:
        self.env = env
        self.children: list[Child] = []
        self.stopping = threading.Event()
        self.lock = threading.Lock()

    def start(self, name: str, command: list[str]) -> Child:
        process = subprocess.Popen(  # noqa: S603 - this module's own commands, never input
            command,
            cwd=ROOT,
            env=self.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,  # Ctrl-C reaches the supervisor, which stops each in turn
        )
        child = Child(name, process)
        with self.lock:
            self.children.append(child)
        threading.Thread(target=self._relay, args=(child,), daemon=True).start()
        return child

    def run(self, name: str, command: list[str]) -> int:
        """Run a step to its end; its exit status."""
        return self.start(name, command).process.wait()

    def _relay(self, child: Child) -> None:
        assert child.process.stdout is not None
        for line in child.process.stdout:
            sys.stdout.write(f"{child.name:>8} | {line}")
            sys.stdout.flush()

    def stop(self) -> None:
        """SIGTERM to each process (a worker then stops its own pool, warmly), SIGKILL to the
        process groups of those still there after ``STOP_TIMEOUT_SECONDS``."""
        self.stopping.set()
        with self.lock:
            running = [c for c in self.children if c.process.poll() is None]
        for child in running:
            child.process.terminate()
        deadline = time.monotonic() + STOP_TIMEOUT_SECONDS
        for child in running:
            try:
                child.process.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):  # it has gone meanwhile
                    os.killpg(child.process.pid, signal.SIGKILL)
                child.process.wait()


def _wait_until_up(url: str, timeout: float, stack: Stack) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and not stack.stopping.is_set():
        try:
            if httpx.get(url, timeout=1).status_code < 500:
                return True
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    return False


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--sandbox-port", type=int, default=8025)
    parser.add_argument("--runs", type=int, default=6, help="demo runs per combination")
    args = parser.parse_args(argv)
    python = sys.executable
    # The sandbox downstreams the demo looks up listen on 127.0.0.1, which outbound requests
    # may reach only when private networks are allowed (ledger/outbound.py).
    os.environ.update(DEBUG="true", PYTHONUNBUFFERED="1", LEDGER_OUTBOUND_ALLOW_PRIVATE="true")
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "console.settings")
    # The demo's alerts and notifications (seed_demo.ON_CALL) are kept as files to read.
    os.environ.setdefault("EMAIL_BACKEND", "django.core.mail.backends.filebased.EmailBackend")
    django.setup()  # the settings every process of the stack reads, the workspace among them
    os.environ.setdefault("EMAIL_FILE_PATH", str(settings.VAR_DIR / "demo-mail"))
    from console.management.commands.seed_demo import demo_workspace

    env = dict(os.environ)
    sandbox_url = f"http://127.0.0.1:{args.sandbox_port}"
    stack = Stack(env)
    stopped = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stopped.set()

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    manage = [python, "manage.py"]
    for step in (["migrate", "--noinput"], ["seed_demo", "--sandbox-url", sandbox_url]):
        if stack.run(step[0], [*manage, *step]) != 0:
            print(f"make run: {step[0]} failed (see above)", file=sys.stderr)
            return 1
    workspace = demo_workspace()
    services = [
        stack.start(
            "sandbox",
            [python, "-m", "sandbox", "--port", str(args.sandbox_port), "--workspace", workspace],
        ),
        stack.start("web", [*manage, "runserver", "--noreload", f"{args.host}:{args.port}"]),
        stack.start(
            "worker",
            [python, "-m", "celery", "-A", "console", "worker", "-B", *WORKER_OPTIONS],
        ),
    ]

    def demo() -> None:
        if not _wait_until_up(f"{sandbox_url}/healthz", 30, stack):
            return
        command = ["demo_agent", "--if-empty", "--runs", str(args.runs)]
        if stack.run("demo", [*manage, *command, "--sandbox-url", sandbox_url]) != 0:
            print("make run: the demo agent failed; delete var/ and run it again", flush=True)

    threading.Thread(target=demo, daemon=True).start()
    print(
        f"Agent Ledger: http://{args.host}:{args.port}/  (demo accounts are listed in README.md;"
        " Ctrl-C stops everything)",
        flush=True,
    )
    status = 0
    while not stopped.wait(0.5):
        ended = next((c for c in services if c.process.poll() is not None), None)
        if ended is not None:
            print(f"make run: {ended.name} exited ({ended.process.returncode})", flush=True)
            status = 1
            break
    stack.stop()
    return status


if __name__ == "__main__":
    sys.exit(main())
