"""A combination's share of runs: a canary's share of new runs, and a combination in shadow
(its share of live runs mirrored into it) and out of it again."""

from __future__ import annotations

from django.db import transaction
from django.utils.translation import gettext_noop

from ledger.combinations.transitions import (
    FULL_SHARE,
    State,
    audit_change,
    changes_share,
    check_canary_room,
    lock_combination,
    require,
    state_of,
)
from ledger.errors import InvalidInput
from ledger.models import Tenant, VersionCombination
from ledger.stored_text import StoredText

# What the ledger refuses of a share (stored English, read translated).
_CANARY_SHARE = StoredText(
    gettext_noop("a canary share is 1 to 10000 basis points; to end a canary, retire it")
)
_SHADOW_SHARE = StoredText(gettext_noop("a shadow share is 0 to 10000 basis points"))
_UNSHADOW_NEEDS_A_REASON = StoredText(
    gettext_noop("taking a combination out of shadow needs a reason")
)


def set_canary(
    *,
    tenant: Tenant,
    combination_id: int,
    share_bp: int,
    actor: str,
    source: str,
    reason: str = "",
) -> VersionCombination:
    """Send ``share_bp`` basis points (1-10000) of new runs (chosen by run id) to this
    combination: a new, retired or shadow combination becomes a canary, a canary gets its new
    share. A canary is ended by ``retire`` (with a reason) or ``activate``."""
    if not 1 <= share_bp <= FULL_SHARE:
        raise InvalidInput(_CANARY_SHARE())
    with transaction.atomic():
        target = lock_combination(tenant, combination_id)
        if target.state == State.CANARY and target.canary_share_bp == share_bp:
            return target
        if not changes_share("canary", target):
            require(target, "canary")
        check_canary_room(tenant, target, share_bp)
        before = state_of(target)
        target.state = State.CANARY
        target.canary_share_bp = share_bp
        target.shadowed_from, target.shadowed_from_share_bp = "", 0
        target.save(
            update_fields=["state", "canary_share_bp", "shadowed_from", "shadowed_from_share_bp"]
        )
        audit_change(
            target, "combination.canary", before=before, actor=actor, source=source, reason=reason
        )
    return target


def set_shadow(
    *,
    tenant: Tenant,
    combination_id: int,
    actor: str,
    source: str,
    share_bp: int = FULL_SHARE,
    reason: str = "",
) -> VersionCombination:
    """Put a new, retired or canary combination in shadow, or change its share: from now on it
    takes only shadow runs, whose side-effecting calls never execute (``ledger.shadow``), and
    ``share_bp`` basis points of live runs (chosen by run id, ``runs.mirror_of``) are to be
    mirrored into it. A combination in shadow keeps its share in ``canary_share_bp``: no live
    run is picked by it (only a canary's share picks runs), and it remembers where it came from
    (``unshadow`` returns it there). Runs already started under it keep it (a combination is
    pinned at a run's start)."""
    if not 0 <= share_bp <= FULL_SHARE:
        raise InvalidInput(_SHADOW_SHARE())
    with transaction.atomic():
        target = lock_combination(tenant, combination_id)
        if target.state == State.SHADOW and target.canary_share_bp == share_bp:
            return target
        before = state_of(target)
        if not changes_share("shadow", target):
            require(target, "shadow")
            target.shadowed_from = target.state
            target.shadowed_from_share_bp = (
                target.canary_share_bp if target.state == State.CANARY else 0
            )
        target.state = State.SHADOW
        target.canary_share_bp = share_bp
        target.save(
            update_fields=["state", "canary_share_bp", "shadowed_from", "shadowed_from_share_bp"]
        )
        audit_change(
            target, "combination.shadow", before=before, actor=actor, source=source, reason=reason
        )
    return target


def unshadow(
    *, tenant: Tenant, combination_id: int, actor: str, source: str, reason: str
) -> VersionCombination:
    """Take a combination out of shadow, back to where it came from: ``new``, ``retired``, or
    a canary at the share it had (if the other canaries leave room for it)."""
    if not reason.strip():
        raise InvalidInput(_UNSHADOW_NEEDS_A_REASON())
    with transaction.atomic():
        target = lock_combination(tenant, combination_id)
        require(target, "unshadow")
        back, share = target.shadowed_from or State.NEW, target.shadowed_from_share_bp
        if back == State.CANARY:
            check_canary_room(tenant, target, share)
        before = state_of(target)
        target.state, target.canary_share_bp = back, share if back == State.CANARY else 0
        target.shadowed_from, target.shadowed_from_share_bp = "", 0
        target.save(
            update_fields=["state", "canary_share_bp", "shadowed_from", "shadowed_from_share_bp"]
        )
        audit_change(
            target,
            "combination.unshadowed",
            before=before,
            actor=actor,
            source=source,
            reason=reason,
        )
    return target
