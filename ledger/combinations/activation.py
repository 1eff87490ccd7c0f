"""A combination created (``new``) and made active, the active one before it retired."""

from __future__ import annotations

from django.db import IntegrityError, transaction
from django.utils.translation import gettext_noop

from ledger.clock import db_now
from ledger.combinations.transitions import (
    State,
    audit_change,
    lock_combination,
    require,
    state_of,
)
from ledger.errors import Conflict, InvalidInput
from ledger.models import Tenant, VersionCombination
from ledger.services.audit import audit
from ledger.stored_text import StoredText

FIELDS = ("model", "prompt", "rules", "tool_schema", "data_version")
# What the ledger refuses (stored English, read translated).
_MISSING_VERSIONS = StoredText(
    gettext_noop("a combination pins all five versions; missing: %(missing)s")
)
_ACTIVATED_MEANWHILE = StoredText(
    gettext_noop("another combination was activated at the same time")
)


def create_combination(
    *, tenant: Tenant, label: str, actor: str, source: str, **versions: str
) -> tuple[VersionCombination, bool]:
    """A combination for these five versions (the same versions give the same one). A new
    combination is ``new``: no run goes to it until it is put in shadow, a canary or active."""
    missing = [name for name in FIELDS if not versions.get(name)]
    if missing:
        raise InvalidInput(_MISSING_VERSIONS(missing=", ".join(missing)))
    fingerprint = VersionCombination.compute_fingerprint(**{f: versions[f] for f in FIELDS})
    existing = VersionCombination.objects.filter(tenant=tenant, fingerprint=fingerprint).first()
    if existing is not None:
        return existing, False
    with transaction.atomic():
        combination = VersionCombination.objects.create(
            tenant=tenant,
            label=label,
            fingerprint=fingerprint,
            state=State.NEW,
            **{f: versions[f] for f in FIELDS},
        )
        audit(
            tenant=tenant,
            actor=actor,
            action="combination.created",
            target=combination,
            source=source,
            after={"label": label, "state": State.NEW, **{f: versions[f] for f in FIELDS}},
        )
    return combination, True


def activate(
    *, tenant: Tenant, combination_id: int, actor: str, source: str, reason: str = ""
) -> VersionCombination:
    """Make a combination the tenant's active one (a new one, a canary promoted, one in shadow
    or a retired one restored); the old active one is retired and remembered as ``previous``
    so a rollback can restore it. A halted combination is resumed or retired, not activated."""
    with transaction.atomic():
        # Lock the active combination first: two activations cannot interleave.
        current = list(
            VersionCombination.objects.select_for_update().filter(tenant=tenant, state=State.ACTIVE)
        )
        target = lock_combination(tenant, combination_id)
        if target.state == State.ACTIVE:
            return target
        require(target, "activate")
        make_active(target, current, actor=actor, source=source, reason=reason, action="activated")
    return target


def make_active(
    target: VersionCombination,
    current: list[VersionCombination],
    *,
    actor: str,
    source: str,
    reason: str,
    action: str,
) -> None:
    """Make a locked combination active, retiring the locked active one (``current``)."""
    before = state_of(target)
    old = next((c for c in current if c.pk != target.pk), None)
    if old is not None:
        old_before = state_of(old)
        old.state = State.RETIRED
        old.save(update_fields=["state"])
        audit_change(
            old, "combination.retired", before=old_before, actor=actor, source=source, reason=reason
        )
    target.previous = old if old is not None else target.previous
    target.state = State.ACTIVE
    target.canary_share_bp = 0
    target.activated_at = db_now()
    target.halted_at = None
    target.halted_reason = ""
    target.halted_from, target.halted_from_share_bp = "", 0
    target.shadowed_from, target.shadowed_from_share_bp = "", 0
    try:
        with transaction.atomic():
            target.save()
    except IntegrityError:  # the one-active constraint: someone else activated meanwhile
        raise Conflict(_ACTIVATED_MEANWHILE()) from None
    audit_change(
        target,
        f"combination.{action}",
        before=before,
        actor=actor,
        source=source,
        reason=reason,
        replaced=old.pk if old is not None else None,
    )
