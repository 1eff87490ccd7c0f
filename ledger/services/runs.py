"""Runs: started under a version combination, finished with a termination reason."""

from __future__ import annotations

import hashlib
import uuid
from typing import cast

from django.db import IntegrityError, transaction

from ledger.clock import db_now
from ledger.errors import Conflict, InvalidInput, NotFound, RunNotRunning
from ledger.models import AuditEvent, Run, Tenant, VersionCombination
from ledger.redaction import redact_for_column
from ledger.services.audit import audit

_SHADOW = VersionCombination.State.SHADOW
RUN_ID_MAX = cast(int, Run._meta.get_field("run_id").max_length)


class RunHalted(Exception):
    """The run's combination is halted: new runs and new calls under it are refused."""

    code = "RUN_HALTED"

    def __init__(self, combination: VersionCombination) -> None:
        super().__init__(f"version combination {combination.label!r} is halted")
        self.combination = combination


def canary_bucket(run_id: str) -> int:
    """A stable number in [0, 10000) for a run id, so a run always lands on the same side."""
    digest = hashlib.sha256(run_id.encode()).digest()
    return int.from_bytes(digest[:8], "big") % 10_000


def mirror_bucket(run_id: str) -> int:
    """A stable number in [0, 10000) for a live run id that says whether it is mirrored, drawn
    apart from ``canary_bucket`` so the mirrored share is not the canary's runs first."""
    return canary_bucket(f"mirror:{run_id}")  # a run id has no ":", so no run id collides


def shadow_run_id(live_run_id: str) -> str:
    """The id of the shadow run that mirrors a live run (within a run id's 200 characters)."""
    named = f"{live_run_id}.shadow"
    if len(named) <= RUN_ID_MAX:
        return named
    return f"shadow.{hashlib.sha256(live_run_id.encode()).hexdigest()}"


def mirror_of(run: Run) -> VersionCombination | None:
    """The combination in shadow a live run is to be mirrored into: the tenant's one in shadow
    (``shadow_combination``) when the run id falls in its share; None for a shadow run."""
    if run.shadow_of_id is not None:
        return None
    combination = _in_shadow(run.tenant_id)
    if combination is None or mirror_bucket(run.run_id) >= combination.canary_share_bp:
        return None
    return combination


def pick_combination(tenant: Tenant, run_id: str) -> VersionCombination | None:
    """The tenant's active combination, or a canary when the run id falls in its share."""
    candidates = list(
        VersionCombination.objects.filter(
            tenant=tenant,
            state__in=[VersionCombination.State.ACTIVE, VersionCombination.State.CANARY],
        ).order_by("pk")
    )
    bucket = canary_bucket(run_id)
    floor = 0
    for combination in candidates:
        if combination.state == VersionCombination.State.CANARY:
            if floor <= bucket < floor + combination.canary_share_bp:
                return combination
            floor += combination.canary_share_bp
    active = next((c for c in candidates if c.state == VersionCombination.State.ACTIVE), None)
    if active is not None:
        return active
    return _last_activated_if_halted(tenant)


def fails_closed_on(tenant: Tenant) -> VersionCombination | None:
    """The halted combination the tenant's new runs are refused under (``pick_combination``
    gives it to them): with no combination active, the last one activated, if it is halted."""
    if VersionCombination.objects.filter(
        tenant=tenant, state=VersionCombination.State.ACTIVE
    ).exists():
        return None
    return _last_activated_if_halted(tenant)


def _last_activated_if_halted(tenant: Tenant) -> VersionCombination | None:
    """Fail closed: with the active combination halted and nothing restored, runs are refused."""
    latest = (
        VersionCombination.objects.filter(tenant=tenant, activated_at__isnull=False)
        .order_by("-activated_at")
        .first()
    )
    return (
        latest if latest is not None and latest.state == VersionCombination.State.HALTED else None
    )


def start_run(
    *,
    tenant: Tenant,
    user_id: str,
    actor: str,
    run_id: str | None = None,
    agent_id: str = "",
    combination_id: int | None = None,
    shadow_of: str | None = None,
    uncombined: bool = False,
    source: str = AuditEvent.Source.API,
) -> tuple[Run, bool]:
    """Start a run (or return the same run again); returns (run, created).

    Starting the same ``run_id`` twice for the same user is harmless and returns the first run,
    so a runtime may retry this call too. With ``shadow_of`` (a live run's id) the run is a
    shadow run mirroring it, under the given combination or the tenant's one in ``shadow``
    (``ledger.shadow`` says what such a run may do). An ``uncombined`` run is under no version
    combination, so no halt or rollback stops it: a human's clean-up (the run compensations
    are entered in, ``reconcile.compensations.compensation_run``).
    """
    run_id = run_id or str(uuid.uuid4())
    live = _live_run(tenant, shadow_of) if shadow_of is not None else None
    # A run that exists is resumed as it is: its combination never changes, and whether that
    # combination was halted since is its calls' answer (RUN_HALTED), not its start's.
    existing = Run.objects.filter(tenant=tenant, run_id=run_id).first()
    if existing is not None:
        return _same_run(existing, user_id, live), False
    if uncombined:
        combination = None
    elif combination_id is not None:
        combination = VersionCombination.objects.filter(tenant=tenant, pk=combination_id).first()
        if combination is None:
            raise NotFound(f"no version combination {combination_id}")
    elif live is not None:
        combination = shadow_combination(tenant)
    else:
        combination = pick_combination(tenant, run_id)
    if combination is not None and combination.state == VersionCombination.State.HALTED:
        raise RunHalted(combination)
    if live is None and combination is not None and combination.state == _SHADOW:
        # A live run under it would run the candidate's side effects for real.
        raise Conflict(f"version combination {combination.label!r} is in shadow: shadow runs only")
    try:
        with transaction.atomic():
            run = Run.objects.create(
                tenant=tenant,
                run_id=run_id,
                user_id=user_id,
                agent_id=agent_id,
                combination=combination,
                shadow_of=live,
            )
            audit(
                tenant=tenant,
                actor=actor,
                action="run.started",
                target=run,
                source=source,
                after={
                    "run_id": run_id,
                    "combination": combination.pk if combination else None,
                    "shadow_of": live.run_id if live else None,
                },
            )
    except IntegrityError:  # a concurrent start of the same run id won
        return _same_run(Run.objects.get(tenant=tenant, run_id=run_id), user_id, live), False
    return run, True


def _live_run(tenant: Tenant, run_id: str) -> Run:
    """The live run a shadow run mirrors: one of this tenant's, and not a shadow itself."""
    live = Run.objects.filter(tenant=tenant, run_id=run_id).first()
    if live is None:
        raise NotFound(f"no run {run_id!r} to mirror")
    if live.shadow_of_id is not None:
        raise InvalidInput(f"run {run_id!r} is a shadow run; a shadow run mirrors a live one")
    return live


def shadow_combination(tenant: Tenant) -> VersionCombination:
    """The tenant's combination in ``shadow`` (the latest one put there)."""
    combination = _in_shadow(tenant.pk)
    if combination is None:
        raise Conflict("no version combination is in shadow: put one in shadow first")
    return combination


def _in_shadow(tenant_id: int) -> VersionCombination | None:
    return (
        VersionCombination.objects.filter(tenant_id=tenant_id, state=_SHADOW)
        .order_by("-pk")
        .first()
    )


def _same_run(run: Run, user_id: str, live: Run | None) -> Run:
    if run.user_id != user_id:
        raise Conflict(f"run {run.run_id!r} already exists for another user")
    if run.shadow_of_id != (live.pk if live else None):
        raise Conflict(f"run {run.run_id!r} already exists and mirrors another run (or none)")
    return run


def finish_run(*, run: Run, termination_reason: str, actor: str) -> Run:
    """Finish a running run; finishing it again with the same reason is harmless. The reason
    is stored redacted."""
    if not termination_reason.strip():
        raise InvalidInput("a termination reason is required")
    column = Run._meta.get_field("termination_reason").max_length
    termination_reason = redact_for_column(termination_reason, column)
    with transaction.atomic():
        locked = Run.objects.select_for_update().get(pk=run.pk)
        if locked.status != Run.Status.RUNNING:
            if locked.termination_reason == termination_reason:
                return locked
            raise RunNotRunning(f"run {run.run_id!r} already ended ({locked.termination_reason})")
        locked.status = Run.Status.FINISHED
        locked.termination_reason = termination_reason
        locked.finished_at = db_now()
        locked.save(update_fields=["status", "termination_reason", "finished_at"])
        audit(
            tenant=locked.tenant_id,
            actor=actor,
            action="run.finished",
            target=locked,
            source=AuditEvent.Source.API,
            after={"termination_reason": termination_reason},
        )
    return locked
