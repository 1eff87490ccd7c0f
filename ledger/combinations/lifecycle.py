"""A combination halted (fail closed), resumed to where it halted from, or retired, each with
a plan that says what it would do (``plan_resume``, ``plan_retire``) for the console."""

from __future__ import annotations

from dataclasses import dataclass, field

from django.db import transaction
from django.utils.translation import gettext_noop

from ledger.clock import db_now
from ledger.combinations.activation import make_active
from ledger.combinations.transitions import (
    State,
    audit_change,
    check_canary_room,
    get_combination,
    lock_combination,
    refusal,
    state_of,
)
from ledger.errors import Conflict, InvalidInput, InvalidTransition
from ledger.models import Run, Tenant, VersionCombination
from ledger.redaction import redact_text
from ledger.services import approvals
from ledger.services.runs import fails_closed_on
from ledger.stored_text import StoredText

# What the ledger stores of a halt and a retirement, and what it refuses (shown translated).
_HALTED = StoredText(
    gettext_noop("version combination %(label)s halted: %(reason)s"), texts=("reason",)
)
_RETIRED_WHILE_HALTED = StoredText(gettext_noop("combination retired while halted"))
_HALT_NEEDS_A_REASON = StoredText(gettext_noop("halting needs a reason"))
_RESUME_NEEDS_A_REASON = StoredText(gettext_noop("resuming needs a reason"))
_RETIRE_NEEDS_A_REASON = StoredText(gettext_noop("retiring needs a reason"))
_NO_ROOM_TO_RESUME = StoredText(
    gettext_noop("canary shares would add up to more than 100%: lower another canary's share first")
)
_FAILS_CLOSED_ON = StoredText(
    gettext_noop(
        "new runs of this tenant fail closed on %(label)s (halted, and no other combination "
        "is active): activate or restore another combination first"
    )
)


@dataclass
class HaltResult:
    """What a halt did: whether this call halted it, the open approvals it voided and the
    runs in flight under it (their next calls are refused with ``RUN_HALTED``)."""

    combination: VersionCombination
    newly: bool
    invalidated_approvals: list[int] = field(default_factory=list)
    runs_in_flight: list[str] = field(default_factory=list)


def halt(
    *, tenant: Tenant, combination_id: int, actor: str, source: str, reason: str
) -> HaltResult:
    """Stop new runs and new calls under a combination (fail closed), from whatever state it
    is in, remembering that state and share for ``resume``. Concurrent halts of one
    combination halt it exactly once. The reason is stored redacted."""
    if not reason.strip():
        raise InvalidInput(_HALT_NEEDS_A_REASON())
    reason = redact_text(reason)
    with transaction.atomic():
        combination = lock_combination(tenant, combination_id)
        if combination.state == State.HALTED:
            return HaltResult(combination, newly=False)
        before = state_of(combination)
        combination.halted_from = combination.state
        combination.halted_from_share_bp = combination.canary_share_bp
        combination.state = State.HALTED
        combination.halted_at = db_now()
        combination.halted_reason = reason
        combination.canary_share_bp = 0
        combination.save(
            update_fields=[
                "state",
                "halted_at",
                "halted_reason",
                "canary_share_bp",
                "halted_from",
                "halted_from_share_bp",
            ]
        )
        runs = list(Run.in_flight(combination).order_by("pk").values_list("run_id", flat=True))
        # An approval given now would let a halted combination's action run.
        voided = approvals.void_open_approvals(
            combination_id=combination.pk,
            actor=actor,
            source=source,
            detail=_HALTED(label=combination.label, reason=reason),
        )
        audit_change(
            combination,
            "combination.halted",
            before=before,
            actor=actor,
            source=source,
            reason=reason,
            invalidated_approvals=voided,
            runs_in_flight=runs,
        )
    return HaltResult(combination, newly=True, invalidated_approvals=voided, runs_in_flight=runs)


@dataclass
class ResumePlan:
    """What resuming a halted combination does: the state and share it returns to, the active
    combination it replaces (when it returns to active), or why it cannot resume now."""

    combination: VersionCombination
    state: str
    share_bp: int
    replaces: VersionCombination | None = None
    refused: str = ""


def plan_resume(*, tenant: Tenant, combination_id: int) -> ResumePlan:
    """What ``resume`` would do now; changes nothing."""
    return _resume_plan(tenant, get_combination(tenant, combination_id))


def _resume_plan(tenant: Tenant, combination: VersionCombination) -> ResumePlan:
    if combination.state != State.HALTED:
        return ResumePlan(
            combination,
            combination.state,
            combination.canary_share_bp,
            refused=refusal(combination, "resume"),
        )
    plan = ResumePlan(combination, combination.halted_from, combination.halted_from_share_bp)
    if plan.state == State.ACTIVE:
        plan.replaces = (
            VersionCombination.objects.filter(tenant=tenant, state=State.ACTIVE)
            .exclude(pk=combination.pk)
            .first()
        )
    elif plan.state == State.CANARY:
        try:
            check_canary_room(tenant, combination, plan.share_bp)
        except Conflict:
            plan.refused = _NO_ROOM_TO_RESUME()
    return plan


def resume(
    *, tenant: Tenant, combination_id: int, actor: str, source: str, reason: str
) -> ResumePlan:
    """Undo a halt: the combination returns to the state and share it halted from (a canary
    at its share, the active combination, which retires the one active now, or shadow at its
    mirrored share). Runs halted meanwhile stay halted and voided approvals stay void.
    Concurrent resumes resume once: the others find it no longer halted and are refused."""
    if not reason.strip():
        raise InvalidInput(_RESUME_NEEDS_A_REASON())
    with transaction.atomic():
        current = list(
            VersionCombination.objects.select_for_update().filter(tenant=tenant, state=State.ACTIVE)
        )
        target = lock_combination(tenant, combination_id)
        plan = _resume_plan(tenant, target)
        if target.state != State.HALTED:
            raise InvalidTransition(plan.refused)
        if plan.refused:
            raise Conflict(plan.refused)
        before = {**state_of(target), "halted_reason": target.halted_reason}
        if plan.state == State.ACTIVE:
            make_active(
                target, current, actor=actor, source=source, reason=reason, action="resumed"
            )
            return plan
        target.state = plan.state
        target.canary_share_bp = plan.share_bp
        target.halted_at, target.halted_reason = None, ""
        target.halted_from, target.halted_from_share_bp = "", 0
        target.save(
            update_fields=[
                "state",
                "canary_share_bp",
                "halted_at",
                "halted_reason",
                "halted_from",
                "halted_from_share_bp",
            ]
        )
        audit_change(
            target, "combination.resumed", before=before, actor=actor, source=source, reason=reason
        )
    return plan


@dataclass
class RetirePlan:
    """What retiring a combination does: its runs in flight (halted with it when it is halted,
    so a retired combination never lets a halted run's calls through), or why it cannot be
    retired now."""

    combination: VersionCombination
    runs_in_flight: list[str]
    halts_runs: bool
    refused: str = ""


def plan_retire(*, tenant: Tenant, combination_id: int) -> RetirePlan:
    """What ``retire`` would do now; changes nothing."""
    return _retire_plan(tenant, get_combination(tenant, combination_id))


def _retire_plan(tenant: Tenant, combination: VersionCombination) -> RetirePlan:
    runs = list(Run.in_flight(combination).order_by("pk").values_list("run_id", flat=True))
    plan = RetirePlan(combination, runs, halts_runs=combination.state == State.HALTED)
    plan.refused = refusal(combination, "retire")
    halted = not plan.refused and combination.state == State.HALTED
    if halted and _fails_closed_on(tenant, combination):
        plan.refused = _FAILS_CLOSED_ON(label=combination.label)
    return plan


def _fails_closed_on(tenant: Tenant, combination: VersionCombination) -> bool:
    """Whether the tenant's runs are refused because of this halted combination."""
    refused_under = fails_closed_on(tenant)
    return refused_under is not None and refused_under.pk == combination.pk


def retire(
    *, tenant: Tenant, combination_id: int, actor: str, source: str, reason: str
) -> RetirePlan:
    """Retire a new, shadow, canary or halted combination (discard it): no new run goes to
    it. A halted one's runs in flight are halted with it. The active combination is retired
    only by activating another (or a rollback)."""
    if not reason.strip():
        raise InvalidInput(_RETIRE_NEEDS_A_REASON())
    with transaction.atomic():
        target = lock_combination(tenant, combination_id)
        plan = _retire_plan(tenant, target)
        if plan.refused:
            raise InvalidTransition(plan.refused)
        before = state_of(target)
        if plan.halts_runs and plan.runs_in_flight:
            Run.halt_in_flight(target, now=db_now(), reason=_RETIRED_WHILE_HALTED())
        target.state = State.RETIRED
        target.canary_share_bp = 0
        target.halted_from, target.halted_from_share_bp = "", 0
        target.shadowed_from, target.shadowed_from_share_bp = "", 0
        target.save(
            update_fields=[
                "state",
                "canary_share_bp",
                "halted_from",
                "halted_from_share_bp",
                "shadowed_from",
                "shadowed_from_share_bp",
            ]
        )
        audit_change(
            target,
            "combination.retired",
            before=before,
            actor=actor,
            source=source,
            reason=reason,
            halted_runs=plan.runs_in_flight if plan.halts_runs else [],
        )
    return plan
