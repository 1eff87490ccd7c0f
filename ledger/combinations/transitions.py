"""The checks every change of a combination's state makes: the states each action applies to
(``ACTION_FROM``, within ``VersionCombination.TRANSITIONS``), the row locked for the change, the
canary shares' room, and the audit of the change with its actor and reason."""

from __future__ import annotations

from typing import Any

from django.utils.translation import gettext_noop

from ledger.errors import Conflict, InvalidTransition, NotFound
from ledger.models import Tenant, VersionCombination
from ledger.services.audit import audit
from ledger.stored_text import StoredText

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


#: The actions that, on a combination already in their state, change its share.
_SHARE_OF = {"canary": State.CANARY, "shadow": State.SHADOW}


def changes_share(action: str, combination: VersionCombination) -> bool:
    """Whether ``action`` only changes the share of a combination already in its state (a
    canary's or a shadow's), rather than moving it to another state."""
    return _SHARE_OF.get(action) == combination.state


# The states' names, stored in a refusal and read in the user's language with it.
STATE_NAMES = (
    StoredText(gettext_noop("new")),
    StoredText(gettext_noop("active")),
    StoredText(gettext_noop("canary")),
    StoredText(gettext_noop("shadow")),
    StoredText(gettext_noop("halted")),
    StoredText(gettext_noop("retired")),
)
# Why an action does not apply to a combination's state (the ledger's refusals are stored
# English, read translated: ``ledger.stored_text``). Resume and unshadow name the one state
# they apply to; a halted or the active combination says what to do instead.
_ONLY_FROM = {
    "resume": StoredText(
        gettext_noop("only a halted combination can be resumed (%(label)s is %(state)s)"),
        texts=("state",),
    ),
    "unshadow": StoredText(
        gettext_noop(
            "only a combination in shadow can be taken out of it (%(label)s is %(state)s)"
        ),
        texts=("state",),
    ),
}
_HALTED = StoredText(
    gettext_noop("%(label)s is halted: resume it (it returns to %(back)s) or retire it"),
    texts=("back",),
)
_BEFORE_THE_HALT = StoredText(gettext_noop("what it was before the halt"))
_ACTIVE = StoredText(
    gettext_noop(
        "%(label)s is the active combination: it is replaced by activating another one, or "
        "by rolling it back"
    )
)
_CANNOT = {
    "activate": StoredText(
        gettext_noop("a %(state)s combination cannot be activated (%(label)s)"),
        texts=("state",),
    ),
    "canary": StoredText(
        gettext_noop("a %(state)s combination cannot be made a canary (%(label)s)"),
        texts=("state",),
    ),
    "shadow": StoredText(
        gettext_noop("a %(state)s combination cannot be put in shadow (%(label)s)"),
        texts=("state",),
    ),
    "retire": StoredText(
        gettext_noop("a %(state)s combination cannot be retired (%(label)s)"), texts=("state",)
    ),
    "rollback": StoredText(
        gettext_noop(
            "a %(state)s combination cannot be rolled back (%(label)s): only an active, "
            "canary, shadow or halted one can be"
        ),
        texts=("state",),
    ),
}


def refusal(combination: VersionCombination, action: str) -> str:
    """Why ``action`` does not apply to the combination's state, saying what to do instead
    (a stored text); empty when it applies."""
    if may(action, combination):
        return ""
    label, state = combination.label, combination.state
    if action in _ONLY_FROM:
        return _ONLY_FROM[action](label=label, state=state)
    if state == State.HALTED:
        return _HALTED(label=label, back=combination.halted_from or _BEFORE_THE_HALT())
    if state == State.ACTIVE:
        return _ACTIVE(label=label)
    return _CANNOT[action](state=state, label=label)


def require(combination: VersionCombination, action: str) -> None:
    """Refuse an action its state does not allow (``refusal``)."""
    if refused := refusal(combination, action):
        raise InvalidTransition(refused)


# Canary shares that do not fit, alone and when a resume would bring one back.
NO_CANARY_ROOM = StoredText(gettext_noop("canary shares would add up to more than 100%"))


def check_canary_room(tenant: Tenant, target: VersionCombination, share_bp: int) -> None:
    """Refuse canary shares that would add up to more than 100% of new runs."""
    others = VersionCombination.objects.filter(tenant=tenant, state=State.CANARY).exclude(
        pk=target.pk
    )
    if sum(c.canary_share_bp for c in others) + share_bp > FULL_SHARE:
        raise Conflict(NO_CANARY_ROOM())


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
