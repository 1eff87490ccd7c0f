"""The checks every change of a combination's state makes: the states each action applies to
(``ACTION_FROM``, within ``VersionCombination.TRANSITIONS``), the row locked for the change, the
canary shares' room, and the audit of the change with its actor and reason."""

from __future__ import annotations

from typing import Any

from ledger.errors import Conflict, InvalidTransition, NotFound
from ledger.models import Tenant, VersionCombination
from ledger.services.audit import audit

State = VersionCombination.State
FULL_SHARE = 10_000


def lock_combination(tenant: Tenant, combination_id: int) -> VersionCombination:
    """The tenant's combination, its row locked for a change (inside a transaction)."""
    combination = (
        VersionCombination.objects.select_for_update()
        .filter(tenant=tenant, pk=combination_id)
        .first()
    )
    if combination is None:
        raise NotFound(f"no version combination {combination_id}")
    return combination


def get_combination(tenant: Tenant, combination_id: int) -> VersionCombination:
    """The tenant's combination, read without a lock (for a plan or a dry run)."""
    combination = VersionCombination.objects.filter(tenant=tenant, pk=combination_id).first()
    if combination is None:
        raise NotFound(f"no version combination {combination_id}")
    return combination


#: The states each action takes a combination out of. Each change is one of the model's
#: ``TRANSITIONS``; a halted combination changes only by ``resume`` or ``retire``.
ACTION_FROM: dict[str, frozenset[str]] = {
    "activate": frozenset({State.NEW, State.SHADOW, State.CANARY, State.RETIRED}),
    "canary": frozenset({State.NEW, State.SHADOW, State.RETIRED}),
    "shadow": frozenset({State.NEW, State.CANARY, State.RETIRED}),
    "unshadow": frozenset({State.SHADOW}),
    "halt": frozenset(set(State) - {State.HALTED}),
    "resume": frozenset({State.HALTED}),
    "retire": frozenset({State.NEW, State.SHADOW, State.CANARY, State.HALTED}),
    # A rollback halts the combination and restores another: it applies to one that takes
    # runs, or took them until its halt.
    "rollback": frozenset({State.ACTIVE, State.CANARY, State.SHADOW, State.HALTED}),
}


def may(action: str, combination: VersionCombination) -> bool:
    """Whether ``action`` (a key of ``ACTION_FROM``) applies to the combination's state."""
    return combination.state in ACTION_FROM[action]


def require(combination: VersionCombination, action: str, *, doing: str) -> None:
    """Refuse an action its state does not allow, saying what to do instead."""
    if may(action, combination):
        return
    message = f"a {combination.state} combination cannot be {doing} ({combination.label})"
    if combination.state == State.HALTED:
        back = combination.halted_from or "where it was"
        message += f"; resume it (it returns to {back}) or retire it"
    elif combination.state == State.ACTIVE:
        message += "; activate another combination, or roll this one back"
    elif action == "rollback":
        message += ": only an active, canary, shadow or halted one can be"
    raise InvalidTransition(message)


def check_canary_room(tenant: Tenant, target: VersionCombination, share_bp: int) -> None:
    """Refuse canary shares that would add up to more than 100% of new runs."""
    others = VersionCombination.objects.filter(tenant=tenant, state=State.CANARY).exclude(
        pk=target.pk
    )
    if sum(c.canary_share_bp for c in others) + share_bp > FULL_SHARE:
        raise Conflict("canary shares would add up to more than 100%")


def audit_change(
    combination: VersionCombination,
    action: str,
    *,
    before: dict[str, Any],
    actor: str,
    source: str,
    reason: str,
    **after: Any,
) -> None:
    """Audit a change of state: the state and share before and after, with the reason."""
    audit(
        tenant=combination.tenant_id,
        actor=actor,
        action=action,
        target=combination,
        source=source,
        before=before,
        after={"state": combination.state, "canary_share_bp": combination.canary_share_bp, **after},
        detail=reason,
    )


def state_of(combination: VersionCombination) -> dict[str, Any]:
    """The state and share an audit records before a change."""
    return {"state": combination.state, "canary_share_bp": combination.canary_share_bp}
