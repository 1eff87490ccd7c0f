"""Conditions that check constraints of several modules share."""

from __future__ import annotations

from enum import StrEnum

from django.db.models import Q

from ledger.domain import Idempotency, ReplayPolicy

SHA256_HEX = r"^[0-9a-f]{64}$"

# The policy must always be the one that goes with the idempotency class.
POLICY_MATCHES = (
    Q(idempotency=Idempotency.IDEMPOTENT, replay_policy=ReplayPolicy.AUTO)
    | Q(idempotency=Idempotency.CONDITIONAL, replay_policy=ReplayPolicy.ASK)
    | Q(idempotency=Idempotency.NON_IDEMPOTENT, replay_policy=ReplayPolicy.NEVER)
)


def one_of(field: str, enum: type[StrEnum]) -> Q:
    return Q(**{f"{field}__in": [member.value for member in enum]})
