"""100 concurrent ``calls`` for one key: exactly one may execute; how long until all know.

Beside it, the same burst of callers on the framework floor (one INSERT each, distinct keys):
the least time this server and machine need to answer that many requests at once, whatever
the requests do."""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

from bench.hotpath import call_body
from bench.load import Http, ms


def burst(callers: int, send: Callable[[int], str]) -> tuple[Counter[str], float]:
    """``callers`` threads released together, each sending one request; the answers by kind
    and the time until the last caller had its answer (seconds)."""
    gate = threading.Barrier(callers + 1)
    answers: Counter[str] = Counter()
    answered: list[float] = []
    lock = threading.Lock()
    began = [0.0]

    def caller(index: int) -> None:
        gate.wait()
        try:
            answer = send(index)
        except Exception as exc:
            answer = f"error:{type(exc).__name__}"
        with lock:
            answers[answer] += 1
            answered.append(time.perf_counter() - began[0])

    threads = [threading.Thread(target=caller, args=(i,), daemon=True) for i in range(callers)]
    for thread in threads:
        thread.start()
    began[0] = time.perf_counter()
    gate.wait()
    for thread in threads:
        thread.join(120)
    return answers, max(answered) if answered else 0.0


def one_key(port: int, token: str, callers: int, key: str) -> dict[str, Any]:
    http = Http(port, token)
    floor = Http(port)

    def call(_index: int) -> str:
        status, body, _took = http.post("/api/v1/calls", call_body(key))
        return body.get("decision", f"http_{status}") if isinstance(body, dict) else "?"

    def insert(index: int) -> str:
        status, _body, _took = floor.post("/bench/floor", f"{key}-floor-{index}", raw=True)
        return f"http_{status}"

    decisions, took = burst(callers, call)
    floor_answers, floor_took = burst(callers, insert)
    return {
        "callers": callers,
        "decisions": dict(decisions),
        "executes": decisions.get("execute", 0),
        "all_answered_ms": ms(took),
        "framework_floor_all_answered_ms": ms(floor_took),
        "framework_floor_answers": dict(floor_answers),
    }
