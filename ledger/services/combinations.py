"""Version combinations: create, activate, canary, halt, and roll back (DESIGN section 8).

Seed 001: pin model, prompt, rules, tool schema and data version together, and when a
combination goes bad, roll back the whole combination, never just the model. Every step is
audited with its actor; running a step twice is harmless.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from django.db import IntegrityError, transaction

from ledger.clock import db_now
from ledger.domain import RecordState
from ledger.errors import Conflict, InvalidInput, NotFound
from ledger.models import (
    ApprovalRequest,
    IdempotencyRecord,
    Run,
    Tenant,
    VersionCombination,
)
from ledger.services import approvals
from ledger.services.audit import audit
from ledger.signals import records_became_unknown

State = VersionCombination.State
FIELDS = ("model", "prompt", "rules", "tool_schema", "data_version")


def create_combination(
    *, tenant: Tenant, label: str, actor: str, source: str, **versions: str
) -> tuple[VersionCombination, bool]:
    """A combination for these five versions (the same versions give the same one)."""
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
            state=State.RETIRED,
            **{f: versions[f] for f in FIELDS},
        )
        audit(
            tenant=tenant,
            actor=actor,
            action="combination.created",
            target=combination,
            source=source,
            after={"label": label, **{f: versions[f] for f in FIELDS}},
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


def activate(
    *, tenant: Tenant, combination_id: int, actor: str, source: str, reason: str = ""
) -> VersionCombination:
    """Make a combination the tenant's active one; the old active one is retired and
    remembered as ``previous`` so a rollback can restore it."""
    with transaction.atomic():
        # Lock every combination of the tenant: two activations cannot interleave.
        current = list(
            VersionCombination.objects.select_for_update().filter(tenant=tenant, state=State.ACTIVE)
        )
        target = _locked(tenant, combination_id)
        if target.state == State.ACTIVE:
            return target
        before = {"state": target.state}
        old = current[0] if current else None
        if old is not None:
            VersionCombination.objects.filter(pk=old.pk).update(state=State.RETIRED)
            audit(
                tenant=tenant,
                actor=actor,
                action="combination.retired",
                target=old,
                source=source,
                before={"state": State.ACTIVE},
                after={"state": State.RETIRED},
                detail=reason,
            )
        target.previous = old if old is not None else target.previous
        target.state = State.ACTIVE
        target.canary_share_bp = 0
        target.activated_at = db_now()
        target.halted_at = None
        target.halted_reason = ""
        try:
            target.save()
        except IntegrityError:  # the one-active constraint: someone else activated meanwhile
            raise Conflict("another combination was activated at the same time") from None
        audit(
            tenant=tenant,
            actor=actor,
            action="combination.activated",
            target=target,
            source=source,
            before=before,
            after={"state": State.ACTIVE},
            detail=reason,
        )
    return target


def set_canary(
    *,
    tenant: Tenant,
    combination_id: int,
    share_bp: int,
    actor: str,
    source: str,
    reason: str = "",
) -> VersionCombination:
    """Send ``share_bp`` basis points of new runs (chosen by run id) to this combination; a
    share of 0 retires it (a canary, or a combination in shadow: no run goes to it)."""
    if not 0 <= share_bp <= 10_000:
        raise InvalidInput("a canary share is 0 to 10000 basis points")
    with transaction.atomic():
        target = _locked(tenant, combination_id)
        if target.state in (State.ACTIVE, State.HALTED):
            raise Conflict(f"an {target.state} combination cannot be a canary")
        others = VersionCombination.objects.filter(tenant=tenant, state=State.CANARY).exclude(
            pk=target.pk
        )
        if sum(c.canary_share_bp for c in others) + share_bp > 10_000:
            raise Conflict("canary shares would add up to more than 100%")
        _set_share(
            target,
            state=State.CANARY if share_bp else State.RETIRED,
            share_bp=share_bp,
            action="combination.canary",
            actor=actor,
            source=source,
            reason=reason,
        )
    return target


def set_shadow(
    *,
    tenant: Tenant,
    combination_id: int,
    actor: str,
    source: str,
    share_bp: int = 10_000,
    reason: str = "",
) -> VersionCombination:
    """Put a retired or canary combination in shadow, or change its share: from now on it
    takes only shadow runs, whose side-effecting calls never execute (``ledger.shadow``), and
    ``share_bp`` basis points of live runs (chosen by run id, ``runs.mirror_of``) are to be
    mirrored into it. A combination in shadow keeps its share in ``canary_share_bp``: no live
    run is picked by it (only a canary's share picks runs). Runs already started under it keep
    it (a combination is pinned at a run's start)."""
    if not 0 <= share_bp <= 10_000:
        raise InvalidInput("a shadow share is 0 to 10000 basis points")
    with transaction.atomic():
        target = _locked(tenant, combination_id)
        if target.state == State.SHADOW and target.canary_share_bp == share_bp:
            return target
        if target.state in (State.ACTIVE, State.HALTED):
            raise Conflict(f"an {target.state} combination cannot be put in shadow")
        _set_share(
            target,
            state=State.SHADOW,
            share_bp=share_bp,
            action="combination.shadow",
            actor=actor,
            source=source,
            reason=reason,
        )
    return target


def _set_share(
    target: VersionCombination,
    *,
    state: str,
    share_bp: int,
    action: str,
    actor: str,
    source: str,
    reason: str,
) -> None:
    """Give a locked combination its new state and share, audited."""
    before = {"state": target.state, "canary_share_bp": target.canary_share_bp}
    target.state = state
    target.canary_share_bp = share_bp
    target.save(update_fields=["state", "canary_share_bp"])
    audit(
        tenant=target.tenant_id,
        actor=actor,
        action=action,
        target=target,
        source=source,
        before=before,
        after={"state": state, "canary_share_bp": share_bp},
        detail=reason,
    )


def halt(
    *, tenant: Tenant, combination_id: int, actor: str, source: str, reason: str
) -> tuple[VersionCombination, bool]:
    """Stop new runs and new calls under a combination (fail closed). Returns whether this
    call halted it: concurrent halts of one combination halt it exactly once."""
    if not reason.strip():
        raise InvalidInput("halting needs a reason")
    now = db_now()
    with transaction.atomic():
        updated = (
            VersionCombination.objects.filter(tenant=tenant, pk=combination_id)
            .exclude(state=State.HALTED)
            .update(state=State.HALTED, halted_at=now, halted_reason=reason, canary_share_bp=0)
        )
        combination = VersionCombination.objects.filter(tenant=tenant, pk=combination_id).first()
        if combination is None:
            raise NotFound(f"no version combination {combination_id}")
        if updated:
            audit(
                tenant=tenant,
                actor=actor,
                action="combination.halted",
                target=combination,
                source=source,
                after={"state": State.HALTED},
                detail=reason,
            )
            # An approval given now would let a halted combination's action run.
            approvals.void_open_approvals(
                combination_id=combination.pk,
                actor=actor,
                source=source,
                detail=f"version combination {combination.label} halted: {reason}",
            )
    return combination, bool(updated)


@dataclass
class RollbackReport:
    """What a rollback did (or, in a dry run, would do)."""

    dry_run: bool
    combination: int
    restored: int | None
    halted_runs: list[str] = field(default_factory=list)
    executing: list[str] = field(default_factory=list)
    unknown: list[str] = field(default_factory=list)
    queued_for_lookup: list[str] = field(default_factory=list)
    # Open approvals of actions planned under it: halting it voids them.
    invalidated_approvals: list[int] = field(default_factory=list)
    needs_human: list[dict[str, Any]] = field(default_factory=list)
    steps: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


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
    4. queue reconciliation of the pending side effects, and report what needs a human.
    """
    bad = VersionCombination.objects.filter(tenant=tenant, pk=combination_id).first()
    if bad is None:
        raise NotFound(f"no version combination {combination_id}")
    restore = _restore_target(tenant, bad, restore_id)
    report = RollbackReport(
        dry_run=dry_run, combination=bad.pk, restored=restore.pk if restore else None
    )
    running = Run.objects.filter(tenant=tenant, combination=bad, status=Run.Status.RUNNING)
    pending = IdempotencyRecord.objects.filter(
        tenant=tenant, combination=bad, state__in=[RecordState.EXECUTING, RecordState.UNKNOWN]
    ).select_related("tool")
    report.halted_runs = list(running.values_list("run_id", flat=True))
    report.executing = [r.key for r in pending if r.state == RecordState.EXECUTING]
    report.unknown = [r.key for r in pending if r.state == RecordState.UNKNOWN]
    report.invalidated_approvals = list(
        ApprovalRequest.objects.filter(
            tenant=tenant, entry__combination=bad, state__in=ApprovalRequest.OPEN_STATES
        )
        .order_by("pk")
        .values_list("pk", flat=True)
    )
    if dry_run:
        report.needs_human = _needs_human(tenant, bad, voided=report.invalidated_approvals)
        report.steps = [
            "would halt the combination and its running runs",
            f"would restore combination {report.restored}",
            f"would queue {len(report.unknown)} unknown side effects for look-up",
            f"would invalidate {len(report.invalidated_approvals)} open approvals",
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
        _combo, newly = halt(
            tenant=tenant,
            combination_id=bad.pk,
            actor=actor,
            source=source,
            reason=f"rollback: {reason}",
        )
        report.steps.append("halted" if newly else "already halted")
        now = db_now()
        halted_runs = running.update(
            status=Run.Status.HALTED, finished_at=now, termination_reason="combination rolled back"
        )
        audit_step("rollback.runs_halted", {"runs": report.halted_runs}, detail=reason)
        report.steps.append(f"halted {halted_runs} running runs")
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
                reason=f"rollback of {bad.label}",
            )
            report.steps.append(f"restored combination {restore.pk}")
        unknown_ids = [r.pk for r in pending if r.state == RecordState.UNKNOWN]
        IdempotencyRecord.objects.filter(pk__in=unknown_ids, escalated_at__isnull=True).update(
            next_reconcile_at=None
        )
        records_became_unknown.send(sender=IdempotencyRecord, record_ids=unknown_ids)
        report.queued_for_lookup = report.unknown
        report.needs_human = _needs_human(tenant, bad, voided=[])
        audit_step("rollback.completed", report.as_dict(), detail=reason)
        report.steps.append(f"queued {len(unknown_ids)} unknown side effects for look-up")
    return report


def _restore_target(
    tenant: Tenant, bad: VersionCombination, restore_id: int | None
) -> VersionCombination | None:
    # A halted combination comes back only by an explicit, audited activate: a rollback never
    # turns a fail-closed halt (by hand or by a threshold) back on.
    if restore_id is not None:
        target = VersionCombination.objects.filter(tenant=tenant, pk=restore_id).first()
        if target is None or target.pk == bad.pk:
            raise InvalidInput("restore a different combination of this tenant")
        if target.state == State.HALTED:
            raise InvalidInput(f"combination {target.label} is halted: activate it explicitly")
        return target
    if bad.state != State.ACTIVE and bad.state != State.HALTED:
        return None  # a canary: the active combination simply stays
    previous = bad.previous if bad.previous_id not in (None, bad.pk) else None
    if previous is not None and previous.state != State.HALTED:
        return previous
    active = (
        VersionCombination.objects.filter(tenant=tenant, state=State.ACTIVE)
        .exclude(pk=bad.pk)
        .first()
    )
    if active is None and bad.state == State.ACTIVE:
        raise Conflict("there is no previous combination to restore; name one")
    return None


def _needs_human(
    tenant: Tenant, bad: VersionCombination, *, voided: list[int]
) -> list[dict[str, Any]]:
    """Escalated unknown calls, and the pending approvals the halt leaves (``voided``: those
    it will void, in a dry run; after the halt, the voided ones are no longer pending)."""
    escalated = IdempotencyRecord.objects.filter(
        tenant=tenant, combination=bad, state=RecordState.UNKNOWN, escalated_at__isnull=False
    )
    approvals = (
        ApprovalRequest.objects.filter(
            tenant=tenant, record__combination=bad, state=ApprovalRequest.State.PENDING
        )
        .exclude(pk__in=voided)
        .select_related("record")
    )
    return [
        {"kind": "unknown_escalated", "key": r.key, "reason": r.escalation_reason}
        for r in escalated
    ] + [{"kind": "pending_approval", "key": a.record.key, "approval_id": a.pk} for a in approvals]
