"""100 concurrent ``calls`` for one key: exactly one may execute; how long until all know."""

from __future__ import annotations

import threading
import time
from collections import Counter
from typing import Any

from bench.hotpath import call_body
from bench.load import Http, ms


def one_key(port: int, token: str, callers: int, key: str) -> dict[str, Any]:
    http = Http(port, token)
    gate = threading.Barrier(callers + 1)
    decisions: Counter[str] = Counter()
    answered: list[float] = []
    lock = threading.Lock()
    began = [0.0]

    def caller() -> None:
        gate.wait()
        try:
            status, body, _took = http.post("/api/v1/calls", call_body(key))
            decision = body.get("decision", f"http_{status}") if isinstance(body, dict) else "?"
        except Exception as exc:
            decision = f"error:{type(exc).__name__}"
        with lock:
            decisions[decision] += 1
            answered.append(time.perf_counter() - began[0])

    threads = [threading.Thread(target=caller, daemon=True) for _ in range(callers)]
    for thread in threads:
        thread.start()
    began[0] = time.perf_counter()
    gate.wait()
    for thread in threads:
        thread.join(120)
    return {
        "callers": callers,
        "decisions": dict(decisions),
        "executes": decisions.get("execute", 0),
        "all_answered_ms": ms(max(answered) if answered else 0.0),
    }
