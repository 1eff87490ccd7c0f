"""Version combinations: create, put in shadow, canary, activate, halt, resume, retire, and
roll back (DESIGN section 8).

Seed 001: pin model, prompt, rules, tool schema and data version together, and when a
combination goes bad, roll back the whole combination, never just the model. Each change of
state is one function here, checked against ``VersionCombination.TRANSITIONS`` under a lock of
the row (docs/rollout.md has the table); every step is audited with its actor.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from django.db import IntegrityError, transaction
from django.utils.translation import gettext_noop

from ledger.clock import db_now
from ledger.domain import RecordState
from ledger.errors import Conflict, InvalidInput, InvalidTransition, NotFound
from ledger.models import (
    ApprovalRequest,
    IdempotencyRecord,
    Run,
    Tenant,
    VersionCombination,
)
from ledger.services import approvals
from ledger.services.audit import audit
from ledger.services.lookup_coverage import cannot_look_up
from ledger.signals import records_became_unknown
from ledger.stored_text import StoredText

State = VersionCombination.State
FIELDS = ("model", "prompt", "rules", "tool_schema", "data_version")
FULL_SHARE = 10_000


class NoRestoreTarget(Conflict):
    """A rollback of the tenant's only active combination, with none named to restore."""


# What the ledger stores of a halt, a retirement and a rollback (shown translated).
_HALTED = StoredText(
    gettext_noop("version combination %(label)s halted: %(reason)s"), texts=("reason",)
)
_RETIRED_WHILE_HALTED = StoredText(gettext_noop("combination retired while halted"))
_ROLLBACK = StoredText(gettext_noop("rollback: %(reason)s"))
_ROLLED_BACK = StoredText(gettext_noop("combination rolled back"))
_ROLLBACK_OF = StoredText(gettext_noop("rollback of %(label)s"))


def create_combination(
    *, tenant: Tenant, label: str, actor: str, source: str, **versions: str
) -> tuple[VersionCombination, bool]:
    """A combination for these five versions (the same versions give the same one). A new
    combination is ``new``: no run goes to it until it is put in shadow, a canary or active."""
    missing = [name for name in FIELDS if not versions.get(name)]
    if missing:
        raise InvalidInput(f"a combination pins all five versions; missing: {', '.join(missing)}")
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


def _locked(tenant: Tenant, combination_id: int) -> VersionCombination:
    combination = (
        VersionCombination.objects.select_for_update()
        .filter(tenant=tenant, pk=combination_id)
        .first()
    )
    if combination is None:
        raise NotFound(f"no version combination {combination_id}")
    return combination


def _get(tenant: Tenant, combination_id: int) -> VersionCombination:
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
}


def may(action: str, combination: VersionCombination) -> bool:
    """Whether ``action`` (a key of ``ACTION_FROM``) applies to the combination's state."""
    return combination.state in ACTION_FROM[action]


def _require(combination: VersionCombination, action: str, *, doing: str) -> None:
    """Refuse an action its state does not allow, saying what to do instead."""
    if may(action, combination):
        return
    message = f"a {combination.state} combination cannot be {doing} ({combination.label})"
    if combination.state == State.HALTED:
        back = combination.halted_from or "where it was"
        message += f"; resume it (it returns to {back}) or retire it"
    elif combination.state == State.ACTIVE:
        message += "; activate another combination, or roll this one back"
    raise InvalidTransition(message)


def _canary_room(tenant: Tenant, target: VersionCombination, share_bp: int) -> None:
    """Refuse canary shares that would add up to more than 100% of new runs."""
    others = VersionCombination.objects.filter(tenant=tenant, state=State.CANARY).exclude(
        pk=target.pk
    )
    if sum(c.canary_share_bp for c in others) + share_bp > FULL_SHARE:
        raise Conflict("canary shares would add up to more than 100%")


def _audit_state(
    combination: VersionCombination,
    action: str,
    *,
    before: dict[str, Any],
    actor: str,
    source: str,
    reason: str,
    **after: Any,
) -> None:
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


def _state_of(combination: VersionCombination) -> dict[str, Any]:
    return {"state": combination.state, "canary_share_bp": combination.canary_share_bp}


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
        target = _locked(tenant, combination_id)
        if target.state == State.ACTIVE:
            return target
        _require(target, "activate", doing="activated")
        _make_active(target, current, actor=actor, source=source, reason=reason, action="activated")
    return target


def _make_active(
    target: VersionCombination,
    current: list[VersionCombination],
    *,
    actor: str,
    source: str,
    reason: str,
    action: str,
) -> None:
    """Make a locked combination active, retiring the locked active one (``current``)."""
    before = _state_of(target)
    old = next((c for c in current if c.pk != target.pk), None)
    if old is not None:
        old_before = _state_of(old)
        old.state = State.RETIRED
        old.save(update_fields=["state"])
        _audit_state(
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
        raise Conflict("another combination was activated at the same time") from None
    _audit_state(
        target,
        f"combination.{action}",
        before=before,
        actor=actor,
        source=source,
        reason=reason,
        replaced=old.pk if old is not None else None,
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
        raise InvalidInput("a canary share is 1 to 10000 basis points; to end a canary, retire it")
    with transaction.atomic():
        target = _locked(tenant, combination_id)
        if target.state == State.CANARY and target.canary_share_bp == share_bp:
            return target
        if target.state != State.CANARY:
            _require(target, "canary", doing="made a canary")
        _canary_room(tenant, target, share_bp)
        before = _state_of(target)
        target.state = State.CANARY
        target.canary_share_bp = share_bp
        target.shadowed_from, target.shadowed_from_share_bp = "", 0
        target.save(
            update_fields=["state", "canary_share_bp", "shadowed_from", "shadowed_from_share_bp"]
        )
        _audit_state(
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
        raise InvalidInput("a shadow share is 0 to 10000 basis points")
    with transaction.atomic():
        target = _locked(tenant, combination_id)
        if target.state == State.SHADOW and target.canary_share_bp == share_bp:
            return target
        before = _state_of(target)
        if target.state != State.SHADOW:
            _require(target, "shadow", doing="put in shadow")
            target.shadowed_from = target.state
            target.shadowed_from_share_bp = (
                target.canary_share_bp if target.state == State.CANARY else 0
            )
        target.state = State.SHADOW
        target.canary_share_bp = share_bp
        target.save(
            update_fields=["state", "canary_share_bp", "shadowed_from", "shadowed_from_share_bp"]
        )
        _audit_state(
            target, "combination.shadow", before=before, actor=actor, source=source, reason=reason
        )
    return target


def unshadow(
    *, tenant: Tenant, combination_id: int, actor: str, source: str, reason: str
) -> VersionCombination:
    """Take a combination out of shadow, back to where it came from: ``new``, ``retired``, or
    a canary at the share it had (if the other canaries leave room for it)."""
    if not reason.strip():
        raise InvalidInput("taking a combination out of shadow needs a reason")
    with transaction.atomic():
        target = _locked(tenant, combination_id)
        if target.state != State.SHADOW:
            raise InvalidTransition(
                f"only a combination in shadow can be taken out of it ({target.label} is "
                f"{target.state})"
            )
        back, share = target.shadowed_from or State.NEW, target.shadowed_from_share_bp
        if back == State.CANARY:
            _canary_room(tenant, target, share)
        before = _state_of(target)
        target.state, target.canary_share_bp = back, share if back == State.CANARY else 0
        target.shadowed_from, target.shadowed_from_share_bp = "", 0
        target.save(
            update_fields=["state", "canary_share_bp", "shadowed_from", "shadowed_from_share_bp"]
        )
        _audit_state(
            target,
            "combination.unshadowed",
            before=before,
            actor=actor,
            source=source,
            reason=reason,
        )
    return target


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
    combination halt it exactly once."""
    if not reason.strip():
        raise InvalidInput("halting needs a reason")
    with transaction.atomic():
        combination = _locked(tenant, combination_id)
        if combination.state == State.HALTED:
            return HaltResult(combination, newly=False)
        before = _state_of(combination)
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
        runs = list(
            Run.objects.filter(tenant=tenant, combination=combination, status=Run.Status.RUNNING)
            .order_by("pk")
            .values_list("run_id", flat=True)
        )
        # An approval given now would let a halted combination's action run.
        voided = approvals.void_open_approvals(
            combination_id=combination.pk,
            actor=actor,
            source=source,
            detail=_HALTED(label=combination.label, reason=reason),
        )
        _audit_state(
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
    return _resume_plan(tenant, _get(tenant, combination_id))


def _resume_plan(tenant: Tenant, combination: VersionCombination) -> ResumePlan:
    if combination.state != State.HALTED:
        return ResumePlan(
            combination,
            combination.state,
            combination.canary_share_bp,
            refused=f"only a halted combination can be resumed ({combination.label} is "
            f"{combination.state})",
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
            _canary_room(tenant, combination, plan.share_bp)
        except Conflict as exc:
            plan.refused = f"{exc.message}: lower another canary's share first"
    return plan


def resume(
    *, tenant: Tenant, combination_id: int, actor: str, source: str, reason: str
) -> ResumePlan:
    """Undo a halt: the combination returns to the state and share it halted from (a canary
    at its share, the active combination, which retires the one active now, or shadow at its
    mirrored share). Runs halted meanwhile stay halted and voided approvals stay void.
    Concurrent resumes resume once: the others find it no longer halted and are refused."""
    if not reason.strip():
        raise InvalidInput("resuming needs a reason")
    with transaction.atomic():
        current = list(
            VersionCombination.objects.select_for_update().filter(tenant=tenant, state=State.ACTIVE)
        )
        target = _locked(tenant, combination_id)
        plan = _resume_plan(tenant, target)
        if target.state != State.HALTED:
            raise InvalidTransition(plan.refused)
        if plan.refused:
            raise Conflict(plan.refused)
        before = {**_state_of(target), "halted_reason": target.halted_reason}
        if plan.state == State.ACTIVE:
            _make_active(
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
        _audit_state(
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
    return _retire_plan(tenant, _get(tenant, combination_id))


def _retire_plan(tenant: Tenant, combination: VersionCombination) -> RetirePlan:
    runs = list(
        Run.objects.filter(tenant=tenant, combination=combination, status=Run.Status.RUNNING)
        .order_by("pk")
        .values_list("run_id", flat=True)
    )
    plan = RetirePlan(combination, runs, halts_runs=combination.state == State.HALTED)
    if combination.state == State.ACTIVE:
        plan.refused = (
            f"the active combination ({combination.label}) is retired by activating another "
            "one, or by rolling it back"
        )
    elif not may("retire", combination):
        plan.refused = f"a {combination.state} combination cannot be retired ({combination.label})"
    elif combination.state == State.HALTED and _fails_closed_on(tenant, combination):
        plan.refused = (
            f"new runs of this tenant fail closed on {combination.label} (halted, and no other "
            "combination is active): activate or restore another combination first"
        )
    return plan


def _fails_closed_on(tenant: Tenant, combination: VersionCombination) -> bool:
    """Whether the tenant's runs are refused because of this halted combination: no other is
    active and it is the last one activated (``runs.pick_combination``)."""
    if VersionCombination.objects.filter(tenant=tenant, state=State.ACTIVE).exists():
        return False
    latest = (
        VersionCombination.objects.filter(tenant=tenant, activated_at__isnull=False)
        .order_by("-activated_at")
        .values_list("pk", flat=True)
        .first()
    )
    return latest == combination.pk


def retire(
    *, tenant: Tenant, combination_id: int, actor: str, source: str, reason: str
) -> RetirePlan:
    """Retire a new, shadow, canary or halted combination (discard it): no new run goes to
    it. A halted one's runs in flight are halted with it. The active combination is retired
    only by activating another (or a rollback)."""
    if not reason.strip():
        raise InvalidInput("retiring needs a reason")
    with transaction.atomic():
        target = _locked(tenant, combination_id)
        plan = _retire_plan(tenant, target)
        if plan.refused:
            raise InvalidTransition(plan.refused)
        before = _state_of(target)
        if plan.halts_runs and plan.runs_in_flight:
            Run.objects.filter(tenant=tenant, combination=target, status=Run.Status.RUNNING).update(
                status=Run.Status.HALTED,
                finished_at=db_now(),
                termination_reason=_RETIRED_WHILE_HALTED(),
            )
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
        _audit_state(
            target,
            "combination.retired",
            before=before,
            actor=actor,
            source=source,
            reason=reason,
            halted_runs=plan.runs_in_flight if plan.halts_runs else [],
        )
    return plan


@dataclass
class RollbackReport:
    """What a rollback did (or, in a dry run, would do). ``steps`` are structured
    (``{"kind": ..., "args": {...}}``) so each reader words them in its own language."""

    dry_run: bool
    combination: int
    restored: int | None
    halted_runs: list[str] = field(default_factory=list)
    executing: list[str] = field(default_factory=list)
    unknown: list[str] = field(default_factory=list)
    # The unknown calls sent (in a dry run: to be sent) to the look-up workers.
    queued_for_lookup: list[str] = field(default_factory=list)
    # Open approvals of actions planned under it: halting it voids them.
    invalidated_approvals: list[int] = field(default_factory=list)
    # Unknown calls no worker will settle (escalated, or nothing to look them up with) and
    # approvals still pending: ``kind``, ``key``, ``record_id``, ``reason``, ``approval_id``.
    needs_human: list[dict[str, Any]] = field(default_factory=list)
    steps: list[dict[str, Any]] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _step(kind: str, **args: Any) -> dict[str, Any]:
    return {"kind": kind, "args": args}


def rollback(
    *,
    tenant: Tenant,
    combination_id: int,
    actor: str,
    source: str,
    reason: str,
    restore_id: int | None = None,
    dry_run: bool = False,
) -> RollbackReport:
    """Roll back a bad combination, in the order of DESIGN section 8:

    1. halt it (new runs and calls under it answer ``RUN_HALTED``), and halt its running runs;
    2. list its in-flight side effects (``executing`` and ``unknown`` records);
    3. make the previous (or the given) combination active;
    4. queue look-ups of the unknown side effects a worker can settle, and report what needs a
       human (escalated calls, calls nothing can look up, approvals still pending).
    """
    bad = _get(tenant, combination_id)
    restore = restore_target(tenant, bad, restore_id)
    report = RollbackReport(
        dry_run=dry_run, combination=bad.pk, restored=restore.pk if restore else None
    )
    running = Run.objects.filter(tenant=tenant, combination=bad, status=Run.Status.RUNNING)
    pending = list(
        IdempotencyRecord.objects.filter(
            tenant=tenant, combination=bad, state__in=[RecordState.EXECUTING, RecordState.UNKNOWN]
        )
        .select_related("tool")
        .order_by("pk")
    )
    unknown = [r for r in pending if r.state == RecordState.UNKNOWN]
    waiting = [r for r in unknown if r.escalated_at is None]
    blocked = cannot_look_up(waiting)
    queued = [r for r in waiting if r.pk not in blocked]
    report.halted_runs = list(running.order_by("pk").values_list("run_id", flat=True))
    report.executing = [r.key for r in pending if r.state == RecordState.EXECUTING]
    report.unknown = [r.key for r in unknown]
    report.queued_for_lookup = [r.key for r in queued]
    report.invalidated_approvals = list(
        ApprovalRequest.objects.filter(
            tenant=tenant, entry__combination=bad, state__in=ApprovalRequest.OPEN_STATES
        )
        .order_by("pk")
        .values_list("pk", flat=True)
    )
    stuck = [
        {
            "kind": "unknown_escalated",
            "key": r.key,
            "record_id": r.pk,
            "reason": r.escalation_reason,
        }
        for r in unknown
        if r.escalated_at is not None
    ] + [
        {"kind": "no_lookup", "key": r.key, "record_id": r.pk, "reason": blocked[r.pk]}
        for r in waiting
        if r.pk in blocked
    ]
    if dry_run:
        report.needs_human = stuck + _pending_approvals(
            tenant, bad, voided=report.invalidated_approvals
        )
        report.steps = [
            _step("halt", combination=bad.pk, runs=len(report.halted_runs)),
            _step("restore", combination=report.restored),
            _step("invalidate_approvals", count=len(report.invalidated_approvals)),
            _step("queue_lookups", count=len(queued)),
            _step("needs_human", count=len(report.needs_human)),
        ]
        return report

    def audit_step(action: str, after: dict[str, Any], *, detail: str = "") -> None:
        audit(
            tenant=tenant,
            actor=actor,
            action=action,
            target=bad,
            source=source,
            after=after,
            detail=detail,
        )

    with transaction.atomic():
        halted = halt(
            tenant=tenant,
            combination_id=bad.pk,
            actor=actor,
            source=source,
            reason=_ROLLBACK(reason=reason),
        )
        report.steps.append(
            _step(
                "halted" if halted.newly else "already_halted",
                combination=bad.pk,
                approvals=len(halted.invalidated_approvals),
            )
        )
        now = db_now()
        halted_runs = running.update(
            status=Run.Status.HALTED, finished_at=now, termination_reason=_ROLLED_BACK()
        )
        audit_step("rollback.runs_halted", {"runs": report.halted_runs}, detail=reason)
        report.steps.append(_step("runs_halted", count=halted_runs))
        audit_step(
            "rollback.pending_listed",
            {"executing": report.executing, "unknown": report.unknown},
        )
        if restore is not None:
            activate(
                tenant=tenant,
                combination_id=restore.pk,
                actor=actor,
                source=source,
                reason=_ROLLBACK_OF(label=bad.label),
            )
            report.steps.append(_step("restored", combination=restore.pk))
        queued_ids = [r.pk for r in queued]
        # Due now: the sweep and the message sent on commit both pick them up.
        IdempotencyRecord.objects.filter(
            pk__in=queued_ids, state=RecordState.UNKNOWN, escalated_at__isnull=True
        ).update(next_reconcile_at=None)
        records_became_unknown.send(sender=IdempotencyRecord, record_ids=queued_ids)
        report.steps.append(_step("lookups_queued", count=len(queued_ids)))
        report.needs_human = stuck + _pending_approvals(tenant, bad, voided=[])
        report.steps.append(_step("needs_human", count=len(report.needs_human)))
        audit_step("rollback.completed", report.as_dict(), detail=reason)
    return report


def restore_choices(tenant: Tenant, bad: VersionCombination) -> list[VersionCombination]:
    """The combinations a rollback of ``bad`` may make active: any other that is not halted
    (a halted one is resumed, never turned back on by a rollback), newest first."""
    return list(
        VersionCombination.objects.filter(tenant=tenant)
        .exclude(pk=bad.pk)
        .exclude(state=State.HALTED)
        .order_by("-pk")[:50]
    )


def _was_active(combination: VersionCombination) -> bool:
    return combination.state == State.ACTIVE or (
        combination.state == State.HALTED and combination.halted_from == State.ACTIVE
    )


def restore_target(
    tenant: Tenant, bad: VersionCombination, restore_id: int | None
) -> VersionCombination | None:
    """The combination a rollback of ``bad`` makes active: ``restore_id`` if given, else the
    one ``bad`` replaced (unless it is halted); None when the active combination stays (a
    canary's rollback) or, for a halted one, another is active already. Raises
    ``NoRestoreTarget`` for the only active combination with none named."""
    # A halted combination comes back only by an explicit, audited resume: a rollback never
    # turns a fail-closed halt (by hand or by a threshold) back on.
    if restore_id is not None:
        target = VersionCombination.objects.filter(tenant=tenant, pk=restore_id).first()
        if target is None or target.pk == bad.pk:
            raise InvalidInput("restore a different combination of this tenant")
        if target.state == State.HALTED:
            raise InvalidInput(f"combination {target.label} is halted: resume it instead")
        return target
    if not _was_active(bad):
        return None  # a canary or a combination in shadow: the active combination stays
    previous = bad.previous if bad.previous_id not in (None, bad.pk) else None
    if previous is not None and previous.state != State.HALTED:
        return previous
    active = (
        VersionCombination.objects.filter(tenant=tenant, state=State.ACTIVE)
        .exclude(pk=bad.pk)
        .first()
    )
    if active is None and bad.state == State.ACTIVE:
        raise NoRestoreTarget(
            "there is no previous combination to restore: name one (restore_id), or create "
            "and activate another combination first"
        )
    return None


def _pending_approvals(
    tenant: Tenant, bad: VersionCombination, *, voided: list[int]
) -> list[dict[str, Any]]:
    """The pending approvals of calls under ``bad`` the halt leaves (``voided``: those it will
    void, in a dry run; after the halt, the voided ones are no longer pending)."""
    pending = (
        ApprovalRequest.objects.filter(
            tenant=tenant, record__combination=bad, state=ApprovalRequest.State.PENDING
        )
        .exclude(pk__in=voided)
        .select_related("record")
        .order_by("pk")
    )
    return [
        {
            "kind": "pending_approval",
            "key": a.record.key,
            "record_id": a.record_id,
            "approval_id": a.pk,
            "reason": "",
        }
        for a in pending
    ]
