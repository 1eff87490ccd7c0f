"""Progressive rollout plans: ramp a candidate combination up by steps, judged at each one.

A plan is a list of steps of traffic share (0 basis points is shadow: the candidate takes only
shadow runs; 10000 makes it the active combination), each with a minimum duration and a
minimum sample size (keyed requests of the candidate during the step). ``evaluate`` (a
periodic task) judges the running step of every running plan against the tenant's enabled
thresholds, on the candidate's metrics since the step started:

- a threshold crossed (or the candidate halted by anyone): the step fails, the plan halts and
  the whole combination is rolled back with ``combinations.rollback`` (fail closed: if the
  rollback cannot be done, the candidate is still halted);
- every threshold met, the duration and the sample size reached: the next step starts;
- otherwise (too few samples, too early): the step waits.

Managers pause, resume, skip a step or abort, each with a reason. Every transition is audited
with the step's measured metrics. A run keeps the combination it started under (pinned at its
start): a step changes only which combination new runs get.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import Max

from ledger import combinations
from ledger.clock import db_now
from ledger.combinations.thresholds import Verdict, judge
from ledger.domain import RecordState
from ledger.errors import Conflict, InvalidInput, LedgerError, NotFound
from ledger.models import (
    IdempotencyRecord,
    RolloutPlan,
    RolloutStep,
    Tenant,
    Threshold,
    VersionCombination,
)
from ledger.redaction import redact_text
from ledger.services import metrics
from ledger.services.audit import audit

logger = logging.getLogger(__name__)
Combo = VersionCombination.State
#: The states a combination may be rolled out from: any but the active one and a halted one.
CANDIDATE_STATES = frozenset(Combo) - {Combo.ACTIVE, Combo.HALTED}
FULL = 10_000
MAX_STEPS = 10
MAX_STEP_MINUTES = 60 * 24 * 7
MAX_STEP_SAMPLES = 1_000_000
#: A reason has something visible in it. Explicit ASCII classes, as ``thresholds`` does, so
#: the API's schema and this check agree on what counts.
REASON_PATTERN = r"[^\x00-\x20\x7f]"


@dataclass(frozen=True, slots=True)
class StepSpec:
    share_bp: int
    min_minutes: int = 0
    min_samples: int = 0


def _check_steps(steps: list[StepSpec]) -> None:
    problems = []
    if not 1 <= len(steps) <= MAX_STEPS:
        problems.append(f"a plan has 1 to {MAX_STEPS} steps")
    shares = [s.share_bp for s in steps]
    if any(not isinstance(s, int) or not 0 <= s <= FULL for s in shares):
        problems.append("share_bp: 0 (shadow) to 10000 (100%)")
    elif shares != sorted(set(shares)):
        problems.append("shares must rise from step to step")
    elif shares and shares[-1] != FULL:
        problems.append("the last step is 10000 (100%): the candidate becomes active")
    for spec in steps:
        if not isinstance(spec.min_minutes, int) or not 0 <= spec.min_minutes <= MAX_STEP_MINUTES:
            problems.append(f"min_minutes: 0 to {MAX_STEP_MINUTES}")
            break
        if not isinstance(spec.min_samples, int) or not 0 <= spec.min_samples <= MAX_STEP_SAMPLES:
            problems.append(f"min_samples: 0 to {MAX_STEP_SAMPLES}")
            break
    if problems:
        raise InvalidInput(f"invalid rollout plan ({'; '.join(problems)})")


def _audit(plan: RolloutPlan, action: str, actor: str, source: str, **fields: Any) -> None:
    audit(tenant=plan.tenant_id, actor=actor, action=action, target=plan, source=source, **fields)


def create_plan(
    *, tenant: Tenant, candidate_id: int, steps: list[StepSpec], actor: str, source: str
) -> RolloutPlan:
    """A plan for a candidate, started at once at its first step. Bad input changes nothing."""
    _check_steps(steps)
    try:
        with transaction.atomic():
            candidate = (
                VersionCombination.objects.select_for_update()
                .filter(tenant=tenant, pk=candidate_id)
                .first()
            )
            if candidate is None:
                raise NotFound(f"no version combination {candidate_id}")
            if candidate.state not in CANDIDATE_STATES:
                raise Conflict(f"an {candidate.state} combination cannot be rolled out")
            if not VersionCombination.objects.filter(tenant=tenant, state=Combo.ACTIVE).exists():
                raise Conflict("a rollout ramps a candidate beside the active combination: none")
            plan = RolloutPlan.objects.create(tenant=tenant, candidate=candidate, created_by=actor)
            RolloutStep.objects.bulk_create(
                RolloutStep(
                    plan=plan,
                    position=n,
                    share_bp=spec.share_bp,
                    min_minutes=spec.min_minutes,
                    min_samples=spec.min_samples,
                )
                for n, spec in enumerate(steps)
            )
            _audit(
                plan,
                "rollout.created",
                actor,
                source,
                after={"candidate": candidate.pk, "steps": [vars_of(s) for s in steps]},
            )
            _start_step(plan, 0, actor=actor, source=source)
    except IntegrityError:  # the one-open-plan constraint
        raise Conflict("the tenant already has an open rollout plan") from None
    return plan


def vars_of(spec: StepSpec) -> dict[str, int]:
    return {
        "share_bp": spec.share_bp,
        "min_minutes": spec.min_minutes,
        "min_samples": spec.min_samples,
    }


def _start_step(plan: RolloutPlan, position: int, *, actor: str, source: str) -> None:
    """Start step ``position``: give the candidate its share of new runs (runs in flight keep
    theirs). The last step makes it the active combination and completes the plan."""
    step = RolloutStep.objects.get(plan=plan, position=position)
    now = db_now()
    plan.current_step = position
    step.state = RolloutStep.State.RUNNING
    step.started_at = now
    step.analysis = {}
    step.save(update_fields=["state", "started_at", "analysis"])
    tenant, candidate = plan.tenant, plan.candidate_id
    if step.share_bp == 0:
        combinations.set_shadow(tenant=tenant, combination_id=candidate, actor=actor, source=source)
    elif step.share_bp < FULL:
        combinations.set_canary(
            tenant=tenant,
            combination_id=candidate,
            share_bp=step.share_bp,
            actor=actor,
            source=source,
        )
    _audit(
        plan,
        "rollout.step_started",
        actor,
        source,
        after={"step": position, "share_bp": step.share_bp},
    )
    if step.share_bp == FULL:
        combinations.activate(
            tenant=tenant,
            combination_id=candidate,
            actor=actor,
            source=source,
            reason=f"rollout plan {plan.pk} reached 100%",
        )
        step.state = RolloutStep.State.PASSED
        step.ended_at = now
        step.save(update_fields=["state", "ended_at"])
        plan.state = RolloutPlan.State.COMPLETED
        plan.finished_at = now
        _audit(plan, "rollout.completed", actor, source, after={"step": position})
    plan.save(update_fields=["current_step", "state", "finished_at"])


def analyse(plan: RolloutPlan, step: RolloutStep, now: datetime) -> dict[str, Any]:
    """The step's measured metrics and its verdict against each enabled threshold: what the
    evaluation decides by, kept on the step and in the audit log."""
    assert step.started_at is not None
    tenant = plan.tenant
    during = metrics.summarize(tenant, since=step.started_at, combination_id=plan.candidate_id)
    verdicts = []
    for threshold in Threshold.objects.filter(tenant=tenant, enabled=True).order_by("pk"):
        since = max(step.started_at, now - timedelta(minutes=threshold.window_minutes))
        summary = metrics.summarize(tenant, since=since, combination_id=plan.candidate_id)
        verdict, value = judge(threshold, summary)
        verdicts.append(
            {
                "threshold": threshold.pk,
                "metric": threshold.metric,
                "above": threshold.above,
                "window_minutes": threshold.window_minutes,
                "observed": value,
                "verdict": verdict.value,
            }
        )
    elapsed = (now - step.started_at).total_seconds()
    waiting = []
    if elapsed < step.min_minutes * 60:
        waiting.append("duration")
    if during.keyed_requests < step.min_samples:
        waiting.append("samples")
    if any(v["verdict"] == Verdict.TOO_FEW_SAMPLES for v in verdicts):
        waiting.append("threshold_samples")
    # The sample is fixed when the step first has enough of it (the newest record then), and
    # judged once all of it has settled: an outcome still in flight may yet be uncertain,
    # and past the last step nothing would judge it. Calls started later belong to the next
    # step. Record ids, not times, mark the sample: no clock to disagree about.
    sample_until = step.analysis.get("sample_until")
    if sample_until is None and not waiting:
        sample_until = IdempotencyRecord.objects.aggregate(last=Max("pk"))["last"] or 0
    in_flight = 0
    if sample_until is not None:
        in_flight = IdempotencyRecord.objects.filter(
            tenant=tenant,
            combination_id=plan.candidate_id,
            state=RecordState.EXECUTING,
            pk__lte=sample_until,
        ).count()
        if in_flight:
            waiting.append("in_flight")
    crossed = [v for v in verdicts if v["verdict"] == Verdict.CROSSED]
    return {
        "sample_until": sample_until,
        "in_flight": in_flight,
        "evaluated_at": now.isoformat(),
        "elapsed_seconds": round(elapsed, 1),
        "samples": during.keyed_requests,
        "metrics": {
            "keyed_requests": during.keyed_requests,
            "dedup_hit_rate": round(during.dedup_hit_rate, 4),
            "became_uncertain": during.became_uncertain,
            "duplicate_side_effects": during.duplicate_side_effects,
            "executions": during.executions,
        },
        "verdicts": verdicts,
        "waiting_for": waiting,
        "outcome": "halt" if crossed else "wait" if waiting else "advance",
    }


def evaluate(*, batch: int | None = None, actor: str = "system") -> dict[str, int]:
    """Judge every running plan (at most ``batch`` per call, oldest first); returns how many
    advanced, halted and waited. Running it twice, or in two workers at once, is harmless:
    each plan is judged under its row lock, skipped if another evaluation holds it."""
    metrics.roll_up()  # the numbers judged are the ledger's as of now
    counts = {"advance": 0, "halt": 0, "wait": 0}
    limit = batch or settings.ROLLOUT_EVALUATION_BATCH
    ids = RolloutPlan.objects.filter(state=RolloutPlan.State.RUNNING).order_by("pk")
    for plan_id in ids.values_list("pk", flat=True)[:limit]:
        outcome = evaluate_plan(plan_id, actor=actor)
        if outcome is not None:
            counts[outcome] += 1
    logger.info("rollout evaluation", extra=counts)
    return counts


def evaluate_plan(plan_id: int, *, actor: str = "system") -> str | None:
    """Judge one running plan's current step; None when it is not running (or is locked)."""
    source = "worker"
    with transaction.atomic():
        plan = (
            RolloutPlan.objects.select_for_update(skip_locked=True, of=("self",))
            .select_related("tenant", "candidate")
            .filter(pk=plan_id, state=RolloutPlan.State.RUNNING)
            .first()
        )
        if plan is None:
            return None
        step = RolloutStep.objects.get(plan=plan, position=plan.current_step)
        now = db_now()
        analysis = analyse(plan, step, now)
        if plan.candidate.state == Combo.HALTED:
            analysis["outcome"] = "halt"
            reason = f"the candidate was halted: {plan.candidate.halted_reason}"
        else:
            crossed = [v for v in analysis["verdicts"] if v["verdict"] == "crossed"]
            reason = "; ".join(
                f"{v['metric']} = {v['observed']:.4g} > {v['above']:g}" for v in crossed
            )
        outcome = analysis["outcome"]
        step.analysis = analysis
        if outcome == "wait":
            step.save(update_fields=["analysis"])
            return outcome
        step.state = RolloutStep.State.FAILED if outcome == "halt" else RolloutStep.State.PASSED
        step.ended_at = now
        step.save(update_fields=["analysis", "state", "ended_at"])
        if outcome == "halt":
            _halt(plan, step, reason, actor=actor, source=source)
        else:
            _audit(
                plan,
                "rollout.step_passed",
                actor,
                source,
                after={"step": step.position, "share_bp": step.share_bp, "analysis": analysis},
            )
            _start_step(plan, step.position + 1, actor=actor, source=source)
    return outcome


def _halt(plan: RolloutPlan, step: RolloutStep, reason: str, *, actor: str, source: str) -> None:
    """Halt the plan and roll the whole candidate back (fail closed: if the rollback cannot
    be done, the candidate is halted all the same and the plan says why)."""
    now = db_now()
    plan.state = RolloutPlan.State.HALTED
    plan.finished_at = now
    plan.reason = reason
    detail = f"rollout plan {plan.pk} step {step.position}: {reason}"
    try:
        report = combinations.rollback(
            tenant=plan.tenant,
            combination_id=plan.candidate_id,
            actor=actor,
            source=source,
            reason=detail,
        )
        rolled_back: dict[str, Any] = {
            "steps": report.steps,
            "halted_runs": len(report.halted_runs),
        }
    except LedgerError as exc:
        combinations.halt(
            tenant=plan.tenant,
            combination_id=plan.candidate_id,
            actor=actor,
            source=source,
            reason=detail,
        )
        plan.reason = f"{reason} (rollback failed: {exc.message}; the candidate is halted)"
        rolled_back = {"error": exc.message}
    plan.save(update_fields=["state", "finished_at", "reason"])
    _audit(
        plan,
        "rollout.halted",
        actor,
        source,
        after={
            "step": step.position,
            "share_bp": step.share_bp,
            "analysis": step.analysis,
            "rollback": rolled_back,
        },
        detail=plan.reason,
    )


class Action:
    PAUSE = "pause"
    RESUME = "resume"
    SKIP = "skip"
    ABORT = "abort"
    ALL = (PAUSE, RESUME, SKIP, ABORT)


# The plan state each action needs.
_NEEDS = {
    Action.PAUSE: RolloutPlan.State.RUNNING,
    Action.RESUME: RolloutPlan.State.PAUSED,
    Action.SKIP: None,  # running or paused
    Action.ABORT: None,
}


_DONE = {
    Action.PAUSE: "paused",
    Action.RESUME: "resumed",
    Action.SKIP: "skipped",
    Action.ABORT: "aborted",
}


def act_on_plan(
    *, tenant: Tenant, plan_id: int, action: str, actor: str, source: str, reason: str
) -> RolloutPlan:
    """A manager's pause, resume, skip (of the current step) or abort, with a reason (stored
    redacted)."""
    if action not in Action.ALL:
        raise InvalidInput(f"action: one of {', '.join(Action.ALL)}")
    if not re.search(REASON_PATTERN, reason):
        raise InvalidInput(f"to {action} a rollout needs a reason")
    reason = redact_text(reason)
    with transaction.atomic():
        plan = (
            RolloutPlan.objects.select_for_update(of=("self",))
            .select_related("tenant", "candidate")
            .filter(tenant=tenant, pk=plan_id)
            .first()
        )
        if plan is None:
            raise NotFound(f"no rollout plan {plan_id}")
        needed = _NEEDS[action]
        if plan.state not in RolloutPlan.OPEN_STATES or (needed and plan.state != needed):
            raise Conflict(f"a {plan.state} rollout cannot {action}")
        step = RolloutStep.objects.get(plan=plan, position=plan.current_step)
        before = {"state": plan.state, "step": step.position}
        if action == Action.PAUSE:
            plan.state = RolloutPlan.State.PAUSED
        elif action == Action.RESUME:
            # The step is judged afresh: its duration and samples count from now.
            plan.state = RolloutPlan.State.RUNNING
            step.started_at = db_now()
            step.analysis = {}
            step.save(update_fields=["started_at", "analysis"])
        elif action == Action.SKIP:
            # A running plan is never at its last step (100% completes it at once), so there
            # is always a next one: skipping the step before it promotes the candidate.
            step.state = RolloutStep.State.SKIPPED
            step.ended_at = db_now()
            step.save(update_fields=["state", "ended_at"])
        else:
            plan.state = RolloutPlan.State.ABORTED
            plan.finished_at = db_now()
            plan.reason = reason
            step.state = RolloutStep.State.SKIPPED
            step.ended_at = plan.finished_at
            step.save(update_fields=["state", "ended_at"])
            # Back to no share of new runs (a halted candidate stays halted: fail closed).
            if plan.candidate.state in (Combo.SHADOW, Combo.CANARY):
                combinations.retire(
                    tenant=tenant,
                    combination_id=plan.candidate_id,
                    actor=actor,
                    source=source,
                    reason=f"rollout plan {plan.pk} aborted: {reason}",
                )
        plan.save(update_fields=["state", "finished_at", "reason"])
        _audit(
            plan,
            f"rollout.{_DONE[action]}",
            actor,
            source,
            before=before,
            after={"state": plan.state, "step": step.position, "analysis": step.analysis},
            detail=reason,
        )
        if action == Action.SKIP:
            _start_step(plan, step.position + 1, actor=actor, source=source)
    return plan
