"""Mirroring live runs into shadow runs (docs/rollout.md).

The ledger decides which live runs a runtime mirrors: a run's ``mirror`` (in the answer that
started it) names the shadow run to start when its id falls in the share of the combination in
shadow. The runtime starts that run pinned to that combination and runs the live run's input
through the candidate agent; its reads run, its side-effecting calls are answered
``SHADOW_DRY_RUN`` and never execute.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Mirror:
    """The shadow run that mirrors one live run."""

    #: The shadow run's id.
    run_id: str
    #: The live run it mirrors.
    live_run_id: str
    #: The end user of both runs.
    user_id: str
    #: The combination in shadow it is pinned to.
    combination_id: int

    @classmethod
    def of(cls, run: dict[str, Any]) -> Mirror | None:
        """The mirror the ledger asks for a live run (its ``mirror``), or None."""
        asked = run.get("mirror")
        if not asked:
            return None
        return cls(asked["run_id"], run["run_id"], run["user_id"], asked["combination_id"])

    @property
    def start(self) -> dict[str, Any]:
        """``start_run``'s arguments for this shadow run."""
        return {"user_id": self.user_id, "run_id": self.run_id, **pinning(self)}


def pinning(mirror: Mirror | None) -> dict[str, Any]:
    """``start_run``'s arguments that make a run (whatever its id) the shadow run of
    ``mirror``; none for a live run. The framework adapters start their runs with them."""
    if mirror is None:
        return {}
    return {"shadow_of": mirror.live_run_id, "combination_id": mirror.combination_id}
