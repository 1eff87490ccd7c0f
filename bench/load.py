"""Closed-loop load: N clients, each doing one unit of work after another, as threads of
several load generator processes."""

from __future__ import annotations

import contextlib
import http.client
import json
import multiprocessing
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from typing import Any


def percentile(values: list[float], fraction: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def ms(seconds: float) -> float:
    return round(seconds * 1000, 2)


@dataclass
class LoadResult:
    clients: int
    seconds: float
    units: int = 0
    errors: int = 0
    latencies: list[float] = field(default_factory=list)
    # Per-request latencies by name (e.g. "calls", "complete").
    parts: dict[str, list[float]] = field(default_factory=dict)

    @property
    def per_second(self) -> float:
        return self.units / self.seconds if self.seconds else 0.0

    def summary(self, unit: str) -> dict[str, Any]:
        out: dict[str, Any] = {
            "clients": self.clients,
            f"{unit}_per_second": round(self.per_second, 1),
            "p50_ms": ms(percentile(self.latencies, 0.50)),
            "p99_ms": ms(percentile(self.latencies, 0.99)),
            "units": self.units,
            "errors": self.errors,
        }
        for name, values in self.parts.items():
            out[f"{name}_p50_ms"] = ms(percentile(values, 0.50))
            out[f"{name}_p99_ms"] = ms(percentile(values, 0.99))
        return out


def merge(results: list[LoadResult]) -> LoadResult:
    """Several runs of the same load as one (for measurements taken in interleaved rounds)."""
    merged = LoadResult(results[0].clients, sum(r.seconds for r in results))
    for result in results:
        merged.units += result.units
        merged.errors += result.errors
        merged.latencies += result.latencies
        for name, values in result.parts.items():
            merged.parts.setdefault(name, []).extend(values)
    return merged


# A unit of work: (client index, iteration) -> per-request latencies by name, or raises. The
# load generator's processes receive it pickled: a module-level callable object, not a closure.
Work = Callable[[int, int], dict[str, float]]


def _run_threads(
    indices: range, seconds: float, work: Work, armed: Callable[[], float]
) -> LoadResult:
    """A thread for each client index, each doing ``work`` one unit after another for
    ``seconds``. Once every thread is up, ``armed`` says when to begin (a ``time.monotonic()``
    instant, the same in every process of the machine)."""
    result = LoadResult(len(indices), seconds)
    lock = threading.Lock()
    go = threading.Event()
    began = [0.0]

    def client(index: int) -> None:
        go.wait()
        time.sleep(max(0.0, began[0] - time.monotonic()))
        deadline = began[0] + seconds
        iteration = 0
        while time.monotonic() < deadline:
            started = time.perf_counter()
            try:
                parts = work(index, iteration)
            except Exception:
                with lock:
                    result.errors += 1
                iteration += 1
                continue
            took = time.perf_counter() - started
            with lock:
                result.units += 1
                result.latencies.append(took)
                for name, value in parts.items():
                    result.parts.setdefault(name, []).append(value)
            iteration += 1

    threads = [threading.Thread(target=client, args=(i,), daemon=True) for i in indices]
    for thread in threads:
        thread.start()
    try:
        began[0] = armed()
    finally:
        go.set()  # told to stop instead, the threads find their deadline passed
    for thread in threads:
        thread.join(seconds + 120)
    result.seconds = time.monotonic() - began[0]
    return result


def _serve(pipe: Connection) -> None:
    """A load generator process: runs each job it is sent, answers with its result."""
    if os.environ.get("DJANGO_SETTINGS_MODULE"):
        import django

        django.setup()  # a job's work may be a class of a module that imports models
    pipe.send("ready")

    def armed() -> float:
        pipe.send("armed")  # every thread is up: the parent says when to begin
        return float(pipe.recv())

    while True:
        try:
            job = pipe.recv()  # unpickles the work: it may fail too
            if job is None:
                return
            indices, seconds, work = job
            pipe.send(_run_threads(indices, seconds, work, armed))
        except EOFError:  # the parent is gone
            return
        except Exception as error:  # the parent raises it
            pipe.send(error)


def _share(work: Work, index: int, processes: int) -> Work:
    """What process ``index`` of ``processes`` runs: the work itself, or, for work that divides
    something among the processes (the raw floor's connections), its ``share``."""
    share = getattr(work, "share", None)
    return share(index, processes) if share is not None else work


class LoadGenerator:
    """Closed-loop load from several processes, so that on a many-core machine the bench
    measures the server and not its own interpreter lock. The processes stay up from one load
    to the next (their pids are the load generator's CPU group, ``bench.cpu``); the clients of
    a load are dealt out among them, each a thread, all starting at one instant."""

    def __init__(self, processes: int) -> None:
        context = multiprocessing.get_context("spawn")  # no copy of this process's threads
        self.pipes: list[Connection] = []
        self.processes: list[BaseProcess] = []
        for _ in range(max(1, processes)):
            ours, theirs = context.Pipe()
            process = context.Process(target=_serve, args=(theirs,), daemon=True)
            process.start()
            theirs.close()  # so a process that dies is an EOFError here, not a wait for ever
            self.pipes.append(ours)
            self.processes.append(process)
        for pipe in self.pipes:  # a job's start instant is near: every process is up first
            if pipe.recv() != "ready":
                raise RuntimeError("a load generator process did not start")

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self.processes if p.pid is not None]

    def run(self, clients: int, seconds: float, work: Work) -> LoadResult:
        """``clients`` clients doing ``work`` for ``seconds``; client i runs in process
        i mod the number of processes. A process that fails or dies stops them all."""
        try:
            return self._run(clients, seconds, work)
        except BaseException:
            self.stop()
            raise

    def _run(self, clients: int, seconds: float, work: Work) -> LoadResult:
        count = len(self.processes)
        busy = [(pipe, range(i, clients, count)) for i, pipe in enumerate(self.pipes[:clients])]
        for index, (pipe, indices) in enumerate(busy):
            pipe.send((indices, seconds, _share(work, index, len(busy))))
        for answer in [pipe.recv() for pipe, _indices in busy]:
            if isinstance(answer, BaseException):  # a process that could not start its threads
                raise answer
        start_at = time.monotonic() + 0.01  # every process's threads are up
        for pipe, _indices in busy:
            pipe.send(start_at)
        answers = [pipe.recv() for pipe, _indices in busy]
        for answer in answers:
            if isinstance(answer, BaseException):
                raise answer
        result = merge(answers)
        result.clients = clients
        result.seconds = max(answer.seconds for answer in answers)
        return result

    def stop(self) -> None:
        for pipe in self.pipes:
            with contextlib.suppress(OSError):
                pipe.send(None)
        for process in self.processes:
            process.join(10)
            if process.is_alive():
                process.kill()

    def __enter__(self) -> LoadGenerator:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


class Http:
    """One short HTTP/1.1 request per call (gunicorn's sync workers close the connection)."""

    def __init__(self, port: int, token: str | None = None) -> None:
        self.port = port
        self.headers = {"Content-Type": "application/json", "Host": "127.0.0.1"}
        if token:
            self.headers["Authorization"] = f"Bearer {token}"

    def post(self, path: str, body: Any, *, raw: bool = False) -> tuple[int, Any, float]:
        data = body if raw else json.dumps(body)
        began = time.perf_counter()
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=120)
        try:
            connection.request("POST", path, body=data, headers=self.headers)
            response = connection.getresponse()
            payload = response.read()
        finally:
            connection.close()
        took = time.perf_counter() - began
        parsed = json.loads(payload) if payload and not raw else payload
        return response.status, parsed, took
