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


def tree(pid: int) -> list[int]:
    """A process and its descendants (a gunicorn arbiter and its workers)."""
    pids = [pid]
    for child in children(pid):
        pids += tree(child)
    return pids


Pids = Callable[[], list[int]]


def web_groups(web_pid: int, load_pids: list[int]) -> dict[str, Pids]:
    """The hot path's groups: gunicorn, PostgreSQL and the load generator (its processes and
    this one, which deals out the loads)."""
    return {
        "web": lambda: tree(web_pid),
        "postgres": postgres_pids,
        "load_generator": lambda: [os.getpid(), *load_pids],
    }


class CpuMeter:
    """Adds up, per kind of load, the CPU each group of processes spent while that load ran.
    A group's pids are read at each snapshot and compared pid by pid: a process started in
    between counts from zero, and one that exits in between (a connection of the previous
    load's closing) neither counts nor takes its earlier CPU off the group's total."""

    def __init__(self, groups: dict[str, Pids]) -> None:
        self.groups = groups
        self.spent: dict[str, dict[str, float]] = {}

    def _snapshot(self) -> dict[str, dict[int, float]]:
        return {name: {p: cpu_seconds(p) for p in pids()} for name, pids in self.groups.items()}

    def measure(self, kind: str, run: Callable[[], T]) -> T:
        before = self._snapshot()
        result = run()
        after = self._snapshot()
        totals = self.spent.setdefault(kind, {})
        for group, now in after.items():
            then = before[group]
            # An exited process reads as 0 (cpu_seconds): only pids alive at the end count.
            spent = sum(cpu - then.get(pid, 0.0) for pid, cpu in now.items() if cpu)
            totals[group] = totals.get(group, 0.0) + max(0.0, spent)
        return result

    def per_unit_ms(self, kind: str, units: int) -> dict[str, float]:
        """Milliseconds of CPU per request (or per look-up), by group, and their total."""
        totals = self.spent.get(kind, {})
        out = {g: round(v / units * 1000, 2) for g, v in totals.items()} if units else {}
        out["total"] = round(sum(out.values()), 2)
        return out
