"""CPU time by process group (the web server, PostgreSQL, the load generator), read from
/proc: on a machine where they share the cores, requests per second follow the CPU *all* of
them spend per request, not the web process's alone."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from bench.processes import children

HZ = os.sysconf("SC_CLK_TCK")
T = TypeVar("T")


def cpu_seconds(pid: int) -> float:
    """User + system CPU of one process (0 when it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / HZ


def postgres_pids() -> list[int]:
    """Every PostgreSQL process on this machine: the bench cannot tell its backends from
    others', so a busy neighbour on the same server inflates this group."""
    pids = []
    for comm in Path("/proc").glob("[0-9]*/comm"):
        try:
            if comm.read_text().strip() == "postgres":
                pids.append(int(comm.parent.name))
        except OSError:
            continue
    return pids


class CpuMeter:
    """Adds up, per kind of load, the CPU each group spent while that load ran."""

    def __init__(self, web_pid: int) -> None:
        self.web_pid = web_pid
        self.spent: dict[str, dict[str, float]] = {}

    def _snapshot(self) -> dict[str, float]:
        return {
            "web": sum(cpu_seconds(p) for p in [self.web_pid, *children(self.web_pid)]),
            "postgres": sum(cpu_seconds(p) for p in postgres_pids()),
            "load_generator": cpu_seconds(os.getpid()),
        }

    def measure(self, kind: str, run: Callable[[], T]) -> T:
        before = self._snapshot()
        result = run()
        after = self._snapshot()
        totals = self.spent.setdefault(kind, {})
        for group, value in after.items():
            # A backend that exits during the run takes its CPU with it: never negative.
            totals[group] = totals.get(group, 0.0) + max(0.0, value - before[group])
        return result

    def per_request_ms(self, kind: str, requests: int) -> dict[str, float]:
        totals = self.spent.get(kind, {})
        out = {g: round(v / requests * 1000, 2) for g, v in totals.items()} if requests else {}
        out["total"] = round(sum(out.values()), 2)
        return out
