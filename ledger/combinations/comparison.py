"""Shadow runs side by side with the live runs they mirror (reads only).

``pair_steps`` lines up the two runs' steps in order (a step is a step id, first seen at its
first call; its last call holds the decision it ended with) and says, per step, where they
differ: the tool chosen, its classification, the decision, and the side effect (the one the
live run caused vs the one the shadow run only intended). ``metric_verdicts`` puts the two
combinations' metrics side by side and judges the shadow's against each enabled threshold
(``thresholds.judge``), as a rollout step would be judged.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from django.db.models import Count, Q

from ledger.clock import db_now
from ledger.combinations import thresholds
from ledger.domain import Decision, Idempotency, ObservationCode
from ledger.models import LedgerEntry, Run, Tenant, Threshold
from ledger.services import metrics

STEP_FIELDS = (
    "run_id",
    "step_id",
    "tool__name",
    "idempotency",
    "decision",
    "observation_code",
    "record__state",
)


@dataclass(frozen=True, slots=True)
class Step:
    """One step of a run as the comparison sees it."""

    tool: str
    idempotency: str
    decision: str
    side_effect: str  # "", "intended (dry run)", or the live action's record state

    @classmethod
    def of(cls, last: dict[str, Any]) -> Step:
        return cls(
            tool=last["tool__name"],
            idempotency=last["idempotency"],
            decision=last["decision"],
            side_effect=_side_effect(last),
        )


def _side_effect(entry: dict[str, Any]) -> str:
    if entry["decision"] == Decision.SHADOW_DRY_RUN:
        return "intended"
    if entry["idempotency"] == Idempotency.IDEMPOTENT or entry["record__state"] is None:
        return ""
    return str(entry["record__state"])


@dataclass(frozen=True, slots=True)
class StepPair:
    number: int
    live: Step | None
    shadow: Step | None
    differs: frozenset[str] = field(default_factory=frozenset)


ASPECTS = ("tool", "idempotency", "decision", "side_effect")


def pair_steps(live: list[Step], shadow: list[Step]) -> list[StepPair]:
    """The two runs' steps in order, with the aspects in which each pair differs (a step one
    run has and the other has not differs in all of them)."""
    pairs = []
    for number in range(max(len(live), len(shadow))):
        one = live[number] if number < len(live) else None
        other = shadow[number] if number < len(shadow) else None
        if one is None or other is None:
            differs = frozenset(ASPECTS)
        else:
            differs = frozenset(a for a in ASPECTS if getattr(one, a) != getattr(other, a))
        pairs.append(StepPair(number + 1, one, other, differs))
    return pairs


def steps_of(run_ids: list[int]) -> dict[int, list[Step]]:
    """Each run's steps in order, in one query (``LIMIT`` by the caller's page of runs)."""
    entries = (
        LedgerEntry.objects.filter(run_id__in=run_ids)
        .order_by("run_id", "created_at", "id")
        .values(*STEP_FIELDS)
    )
    last: dict[int, dict[str, dict[str, Any]]] = {run_id: {} for run_id in run_ids}
    for entry in entries:
        # dicts keep the order of first insertion: a step's place is its first call's.
        last[entry["run_id"]][entry["step_id"]] = entry
    return {run_id: [Step.of(e) for e in steps.values()] for run_id, steps in last.items()}


@dataclass(frozen=True, slots=True)
class ShadowPair:
    shadow: Run
    live: Run
    steps: list[StepPair]

    @property
    def differing(self) -> list[StepPair]:
        return [step for step in self.steps if step.differs]


def shadow_pairs(tenant: Tenant, *, limit: int = 50, before: int | None = None) -> list[ShadowPair]:
    """The tenant's shadow runs, newest first, each with the live run it mirrors and their
    steps side by side."""
    shadows = Run.objects.filter(tenant=tenant, shadow_of__isnull=False)
    if before is not None:
        shadows = shadows.filter(pk__lt=before)
    page = list(
        shadows.select_related("combination", "shadow_of", "shadow_of__combination").order_by(
            "-pk"
        )[:limit]
    )
    steps = steps_of([r.pk for r in page] + [r.shadow_of_id for r in page if r.shadow_of_id])
    return [
        ShadowPair(run, run.shadow_of, pair_steps(steps[run.shadow_of.pk], steps[run.pk]))
        for run in page
        if run.shadow_of is not None
    ]


def shadow_pair(tenant: Tenant, shadow_run_pk: int) -> ShadowPair | None:
    """One shadow run of the tenant with its live run, or None."""
    run = (
        Run.objects.filter(tenant=tenant, pk=shadow_run_pk, shadow_of__isnull=False)
        .select_related("combination", "shadow_of", "shadow_of__combination")
        .first()
    )
    if run is None or run.shadow_of is None:
        return None
    steps = steps_of([run.pk, run.shadow_of.pk])
    return ShadowPair(run, run.shadow_of, pair_steps(steps[run.shadow_of.pk], steps[run.pk]))


@dataclass(frozen=True, slots=True)
class MetricRow:
    metric: str
    live: float
    shadow: float
    threshold: Threshold | None = None
    verdict: str = "no_threshold"  # met, crossed, too_few_samples, no_threshold


def _approvals_and_rejections(tenant: Tenant, combination_id: int | None, since: Any) -> Any:
    return LedgerEntry.objects.filter(
        tenant=tenant, combination_id=combination_id, created_at__gte=since
    ).aggregate(
        approvals=Count("pk", filter=Q(decision=Decision.APPROVAL_REQUIRED)),
        rejections=Count("pk", filter=Q(observation_code=ObservationCode.APPROVAL_REJECTED)),
    )


def metric_verdicts(
    tenant: Tenant, *, live_id: int | None, shadow_id: int, window_minutes: int = 60 * 24
) -> list[MetricRow]:
    """Both combinations' metrics over the window, and the shadow's verdict against every
    enabled threshold of the tenant (each judged over its own window)."""
    since = db_now() - timedelta(minutes=window_minutes)
    live = metrics.summarize(tenant, since=since, combination_id=live_id)
    shadow = metrics.summarize(tenant, since=since, combination_id=shadow_id)
    rows: list[MetricRow] = []
    thresholds = list(Threshold.objects.filter(tenant=tenant, enabled=True).order_by("pk"))
    for metric, live_value, shadow_value in (
        (Threshold.Metric.DEDUP_HIT_RATE, live.dedup_hit_rate, shadow.dedup_hit_rate),
        (Threshold.Metric.UNCERTAIN_RESULTS, live.became_uncertain, shadow.became_uncertain),
        (
            Threshold.Metric.DUPLICATE_SIDE_EFFECTS,
            live.duplicate_side_effects,
            shadow.duplicate_side_effects,
        ),
    ):
        judged = [t for t in thresholds if t.metric == metric]
        if not judged:
            rows.append(MetricRow(metric, live_value, shadow_value))
        for threshold in judged:
            rows.append(
                MetricRow(
                    metric,
                    live_value,
                    shadow_value,
                    threshold,
                    _verdict(tenant, threshold, shadow_id),
                )
            )
    live_humans = _approvals_and_rejections(tenant, live_id, since)
    shadow_humans = _approvals_and_rejections(tenant, shadow_id, since)
    for humans in ("approvals", "rejections"):
        rows.append(MetricRow(humans, live_humans[humans], shadow_humans[humans]))
    return rows


def _verdict(tenant: Tenant, threshold: Threshold, combination_id: int) -> str:
    since = db_now() - timedelta(minutes=threshold.window_minutes)
    summary = metrics.summarize(tenant, since=since, combination_id=combination_id)
    return thresholds.judge(threshold, summary)[0].value
