"""Closed-loop load: N client threads, each doing one unit of work after another."""

from __future__ import annotations

import http.client
import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
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


# A unit of work: (client index, iteration) -> per-request latencies by name, or raises.
Work = Callable[[int, int], dict[str, float]]


def run_load(clients: int, seconds: float, work: Work) -> LoadResult:
    result = LoadResult(clients, seconds)
    lock = threading.Lock()
    start = threading.Barrier(clients + 1)
    deadline = [0.0]

    def client(index: int) -> None:
        start.wait()
        iteration = 0
        while time.monotonic() < deadline[0]:
            began = time.perf_counter()
            try:
                parts = work(index, iteration)
            except Exception:
                with lock:
                    result.errors += 1
                iteration += 1
                continue
            took = time.perf_counter() - began
            with lock:
                result.units += 1
                result.latencies.append(took)
                for name, value in parts.items():
                    result.parts.setdefault(name, []).append(value)
            iteration += 1

    threads = [threading.Thread(target=client, args=(i,), daemon=True) for i in range(clients)]
    for thread in threads:
        thread.start()
    deadline[0] = time.monotonic() + seconds
    began = time.monotonic()
    start.wait()
    for thread in threads:
        thread.join(seconds + 120)
    result.seconds = time.monotonic() - began
    return result


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
