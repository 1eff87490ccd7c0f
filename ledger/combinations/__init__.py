"""Version combinations: create, put in shadow, canary, activate, halt, resume, retire, and
roll back (DESIGN section 8).

Seed 001: pin model, prompt, rules, tool schema and data version together, and when a
combination goes bad, roll back the whole combination, never just the model. Each change of
state is one function, checked against ``VersionCombination.TRANSITIONS`` under a lock of the
row (docs/rollout.md has the table); every step is audited with its actor. One module a
responsibility: ``transitions`` (the states each action applies to, the checks every change
makes), ``activation``, ``shares`` (canary and shadow), ``lifecycle`` (halt, resume, retire)
and ``rollbacks``; every function the API, the console and the rollouts call is importable
from here.
"""

from ledger.combinations.activation import FIELDS, activate, create_combination
from ledger.combinations.lifecycle import (
    ResumePlan,
    halt,
    plan_resume,
    plan_retire,
    resume,
    retire,
)
from ledger.combinations.rollbacks import (
    NoRestoreTarget,
    RollbackReport,
    restore_choices,
    restore_target,
    rollback,
)
from ledger.combinations.shares import set_canary, set_shadow, unshadow
from ledger.combinations.transitions import ACTION_FROM, changes_share, may, refusal

__all__ = [
    "ACTION_FROM",
    "FIELDS",
    "NoRestoreTarget",
    "ResumePlan",
    "RollbackReport",
    "activate",
    "changes_share",
    "create_combination",
    "halt",
    "may",
    "plan_resume",
    "plan_retire",
    "refusal",
    "restore_choices",
    "restore_target",
    "resume",
    "retire",
    "rollback",
    "set_canary",
    "set_shadow",
    "unshadow",
]
