"""The drills, grouped by kind. Each is a function ``(ctx, result) -> None`` that drives the
stack through the Python client and records checks and evidence on ``result``."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from drill.context import DrillContext
from drill.report import DrillResult


@dataclass(frozen=True)
class Drill:
    name: str
    group: str
    description: str
    run: Callable[[DrillContext, DrillResult], None]


def all_drills() -> list[Drill]:
    """Every drill in the order ``make drill`` runs them (rollback and rollout last: they
    change which combination is active)."""
    from drill.drills import (
        acceptance,
        dbserver,
        downstream,
        infrastructure,
        regression,
        rollback,
        rollout,
        safety,
        seed_cases,
        store,
    )

    return [
        *seed_cases.DRILLS,
        *acceptance.DRILLS,
        *regression.drills(),
        *safety.DRILLS,
        *infrastructure.DRILLS,
        *store.DRILLS,
        *dbserver.DRILLS,
        *downstream.DRILLS,
        *rollback.DRILLS,
        *rollout.DRILLS,
    ]
