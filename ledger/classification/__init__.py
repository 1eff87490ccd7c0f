"""Tool classification: pure functions that decide idempotency and replay policy.

``Classification`` is the single result type. Every classifier returns one with a human-readable
``reason`` and the ``rule`` that produced it, and classifications combine by taking the more
conservative of the two (``most_conservative``).
"""

from __future__ import annotations

from dataclasses import dataclass

from django.utils.translation import gettext_noop

from ledger.domain import POLICY_FOR, Idempotency, ReplayPolicy
from ledger.stored_text import StoredText

#: The rules of what people of the tenant decided: a manager's override, an org policy rule
#: (``policy.<id>``). The per-call classifiers do not second-guess them (``by_people``).
OVERRIDE_RULE = "override"
POLICY_RULE_PREFIX = "policy."


@dataclass(frozen=True, slots=True)
class Classification:
    idempotency: Idempotency
    replay_policy: ReplayPolicy
    destructive: bool
    reason: str
    rule: str

    @property
    def by_people(self) -> bool:
        """Decided by people of the tenant (an override or an org policy rule), not read from
        the tool's name, description or catalogue."""
        return self.rule == OVERRIDE_RULE or self.rule.startswith(POLICY_RULE_PREFIX)

    @classmethod
    def of(
        cls, idempotency: Idempotency, *, reason: str, rule: str, destructive: bool = False
    ) -> Classification:
        """A classification whose replay policy is the standard one for ``idempotency``."""
        return cls(idempotency, POLICY_FOR[idempotency], destructive, reason, rule)

    def as_dict(self) -> dict[str, object]:
        return {
            "idempotency": self.idempotency.value,
            "replay_policy": self.replay_policy.value,
            "destructive": self.destructive,
            "reason": self.reason,
            "rule": self.rule,
        }


UNDECLARED = Classification.of(
    Idempotency.NON_IDEMPOTENT,
    reason=StoredText(
        gettext_noop("No idempotency was declared, so the tool is treated as non-idempotent.")
    )(),
    rule="default.undeclared",
)


def most_conservative(first: Classification, second: Classification) -> Classification:
    """The more conservative of two classifications; destructive if either is.

    On a tie the first one's reason and rule are kept, so callers pass the established
    classification first and the candidate second.
    """
    winner = second if second.idempotency.rank > first.idempotency.rank else first
    destructive = first.destructive or second.destructive
    if winner.destructive == destructive:
        return winner
    return Classification(
        winner.idempotency,
        winner.replay_policy,
        destructive,
        winner.reason,
        winner.rule,
    )
