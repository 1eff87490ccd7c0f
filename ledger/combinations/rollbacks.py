"""A bad combination rolled back in the order of DESIGN section 8, with its report (or, in a
dry run, its preview) and the combination it restores."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from django.db import transaction
from django.utils.translation import gettext_noop

from ledger.clock import db_now
from ledger.combinations.activation import activate
from ledger.combinations.lifecycle import halt
from ledger.combinations.transitions import (
    State,
    get_combination,
    lock_combination,
    require,
)
from ledger.domain import RecordState
from ledger.errors import Conflict, InvalidInput
from ledger.models import ApprovalRequest, IdempotencyRecord, Run, Tenant, VersionCombination
from ledger.services import approvals
from ledger.services.audit import audit
from ledger.services.lookup_coverage import cannot_look_up
from ledger.signals import records_became_unknown
from ledger.stored_text import StoredText


class NoRestoreTarget(Conflict):
    """A rollback of the tenant's only active combination, with none named to restore."""


# What the ledger stores of a rollback, and what it refuses (shown translated).
_ROLLBACK = StoredText(gettext_noop("rollback: %(reason)s"))
_ROLLED_BACK = StoredText(gettext_noop("combination rolled back"))
_ROLLBACK_OF = StoredText(gettext_noop("rollback of %(label)s"))
_RESTORE_ANOTHER = StoredText(gettext_noop("restore a different combination of this tenant"))
_RESTORE_HALTED = StoredText(gettext_noop("combination %(label)s is halted: resume it instead"))
_NO_PREVIOUS = StoredText(
    gettext_noop(
        "there is no previous combination to restore: name one (restore_id), or create and "
        "activate another combination first"
    )
)


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
    # Nothing was (in a dry run: would be) changed: the combination was halted already, no run
    # was running under it, no other is made active and no look-up is queued.
    changes_nothing: bool = False

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

    A new or a retired combination is refused (``ACTION_FROM``), a dry run too.
    """
    bad = get_combination(tenant, combination_id)
    require(bad, "rollback")
    restore = restore_target(tenant, bad, restore_id)
    report = RollbackReport(
        dry_run=dry_run, combination=bad.pk, restored=restore.pk if restore else None
    )
    restores = restore is not None and restore.state != State.ACTIVE  # else it stays active
    running = Run.in_flight(bad)
    pending = list(
        IdempotencyRecord.objects.filter(
            tenant=tenant, combination=bad, state__in=[RecordState.EXECUTING, RecordState.UNKNOWN]
        )
        .select_related("tool")
        .order_by("pk")
    )
    unknown = [r for r in pending if r.state == RecordState.UNKNOWN]
    waiting = [r for r in unknown if not r.escalated]
    blocked = cannot_look_up(waiting)
    queued = [r for r in waiting if r.pk not in blocked]
    report.halted_runs = list(running.order_by("pk").values_list("run_id", flat=True))
    report.executing = [r.key for r in pending if r.state == RecordState.EXECUTING]
    report.unknown = [r.key for r in unknown]
    report.queued_for_lookup = [r.key for r in queued]
    report.invalidated_approvals = list(
        approvals.voided_by_halt(bad.pk).values_list("pk", flat=True)
    )
    stuck = [
        {
            "kind": "unknown_escalated",
            "key": r.key,
            "record_id": r.pk,
            "reason": r.escalation_reason,
        }
        for r in unknown
        if r.escalated
    ] + [
        {"kind": "no_lookup", "key": r.key, "record_id": r.pk, "reason": blocked[r.pk]}
        for r in waiting
        if r.pk in blocked
    ]
    if dry_run:
        report.changes_nothing = (
            bad.state == State.HALTED and not report.halted_runs and not restores and not queued
        )
        report.needs_human = stuck + _pending_approvals(bad)
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
        # Changed meanwhile (retired, say): checked again under the lock.
        require(lock_combination(tenant, bad.pk), "rollback")
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
        halted_runs = Run.halt_in_flight(bad, now=now, reason=_ROLLED_BACK())
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
            ~IdempotencyRecord.escalated_q(), pk__in=queued_ids, state=RecordState.UNKNOWN
        ).update(next_reconcile_at=None)
        records_became_unknown.send(sender=IdempotencyRecord, record_ids=queued_ids)
        report.steps.append(_step("lookups_queued", count=len(queued_ids)))
        report.changes_nothing = (
            not halted.newly and not halted_runs and not restores and not queued_ids
        )
        report.needs_human = stuck + _pending_approvals(bad)
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
            raise InvalidInput(_RESTORE_ANOTHER())
        if target.state == State.HALTED:
            raise InvalidInput(_RESTORE_HALTED(label=target.label))
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
        raise NoRestoreTarget(_NO_PREVIOUS())
    return None


def _pending_approvals(bad: VersionCombination) -> list[dict[str, Any]]:
    """The approvals of calls first recorded under ``bad`` that its halt leaves open for a
    human: those of a retry planned under another combination (the halt voids the ones
    planned under ``bad``, ``voided_by_halt``), read as ``approvals.still_open`` reads what
    waits for an approver. The same before the halt (a dry run) and after it."""
    pending = (
        approvals.still_open(ApprovalRequest.objects.filter(record__combination=bad))
        .exclude(pk__in=approvals.voided_by_halt(bad.pk))
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
