"""Prometheus exposition at /metrics: the three safety metrics, decisions, reconcile outcomes,
queue ages and the steps of rollout plans, read from the rollups, a few indexed counts and the
steps' last analyses at scrape time (docs/runbook.md lists the families).

Every counter is a sum of rollup buckets (``ledger.services.metrics``), which TTL cleanup never
deletes, so no counter goes down; what is read from rows that come and go (records in
``unknown`` now, open approvals, compensations) is a gauge. Names follow Prometheus's
conventions: base units (``_seconds``), shares and rates as 0-1 ``_ratio``, ``_total`` on
counters.

Each reader sees the tenants it may: the scraper's bearer token (``METRICS_TOKEN``) every
tenant, a signed-in user the tenants they administer (``console.members.administered_tenants``);
anyone else gets a 401, kept in the security log (``console.denials``).
"""

from __future__ import annotations

import hmac
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db.models import Count, Min, OuterRef, Q, QuerySet, Subquery, Sum
from django.db.models.functions import Now
from django.http import HttpRequest, HttpResponse
from django.views.decorators.http import require_GET
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector, CollectorRegistry

from console.denials import Reason, record_denial
from console.members import administered_tenants
from ledger.clock import db_now, elapsed_since
from ledger.combinations import rollouts
from ledger.compensation import compensation_state
from ledger.domain import Decision, RecordState
from ledger.models import (
    Compensation,
    IdempotencyRecord,
    MetricBucket,
    ReconcileBucket,
    RolloutPlan,
    RolloutStep,
)
from ledger.services.approvals import still_open
from ledger.services.metrics import COUNTERS, bucket_of, dedup_hit_rate

RATE_WINDOW = timedelta(minutes=15)
LABELS = ["tenant", "combination", "tool"]


def _rows(query: Any) -> list[dict[str, Any]]:
    return [dict(row) for row in query]


class LedgerCollector(Collector):
    """Every family, of the tenants in ``tenant_ids`` (None: every tenant)."""

    def __init__(self, tenant_ids: list[int] | None) -> None:
        self.tenant_ids = tenant_ids

    def _of(self, rows: QuerySet[Any], tenant: str = "tenant") -> QuerySet[Any]:
        """``rows`` of the collector's tenants; ``tenant`` names the rows' path to theirs."""
        if self.tenant_ids is None:
            return rows
        return rows.filter(**{f"{tenant}__in": self.tenant_ids})

    def collect(self) -> Iterator[Metric]:
        yield from self._counters()
        yield from self._rates()
        yield from self._live()
        yield from self._rollout_steps()

    def _counters(self) -> Iterator[Metric]:
        families = {
            name: CounterMetricFamily(
                f"agent_ledger_{name}", f"{name.replace('_', ' ')}", labels=LABELS
            )
            for name in (
                "keyed_requests",
                "dedup_hits",
                "executions",
                "became_uncertain",
                "duplicate_side_effects",
            )
        }
        decisions = CounterMetricFamily(
            "agent_ledger_decisions", "decisions given to calls", labels=[*LABELS, "decision"]
        )
        rows = _rows(
            self._of(MetricBucket.objects.all())
            .values("tenant__slug", "combination__label", "tool_name")
            .annotate(**{name: Sum(name) for name in COUNTERS})
        )
        for row in rows:
            labels = [row["tenant__slug"], row["combination__label"] or "", row["tool_name"]]
            for name, family in families.items():
                family.add_metric(labels, row[name] or 0)
            for decision in Decision:
                decisions.add_metric([*labels, decision.value], row[f"decided_{decision}"] or 0)
        yield from families.values()
        yield decisions

    def _rates(self) -> Iterator[Metric]:
        rate = GaugeMetricFamily(
            "agent_ledger_dedup_hit_ratio",
            "dedup hits / keyed requests over the last 15 minutes (0-1)",
            labels=["tenant", "combination"],
        )
        since = bucket_of(db_now() - RATE_WINDOW)
        rows = (
            self._of(MetricBucket.objects.filter(bucket_start__gte=since))
            .values("tenant__slug", "combination__label")
            .annotate(hits=Sum("dedup_hits"), keyed=Sum("keyed_requests"))
        )
        for row in rows:
            value = dedup_hit_rate(row["hits"], row["keyed"])
            rate.add_metric([row["tenant__slug"], row["combination__label"] or ""], value)
        yield rate

    def _live(self) -> Iterator[Metric]:
        unknown = self._of(IdempotencyRecord.objects.filter(state=RecordState.UNKNOWN))
        uncertain = GaugeMetricFamily(
            "agent_ledger_uncertain_records",
            "records whose outcome is unknown now",
            labels=["tenant", "combination"],
        )
        for row in _rows(
            unknown.values("tenant__slug", "combination__label").annotate(n=Count("pk"))
        ):
            uncertain.add_metric([row["tenant__slug"], row["combination__label"] or ""], row["n"])
        yield uncertain
        outcomes = CounterMetricFamily(
            "agent_ledger_reconcile_attempts",
            "reconciliation attempts by outcome",
            labels=["tenant", "outcome"],
        )
        for row in _rows(
            self._of(ReconcileBucket.objects.all())
            .values("tenant__slug", "outcome")
            .annotate(n=Sum("attempts"))
        ):
            outcomes.add_metric([row["tenant__slug"], row["outcome"]], row["n"])
        yield outcomes
        lookup_age = GaugeMetricFamily(
            "agent_ledger_oldest_unknown_age_seconds",
            "age of the oldest record whose outcome is unknown",
            labels=["tenant"],
        )
        oldest_unknown = unknown.values("tenant__slug").annotate(
            age=elapsed_since(Min("uncertain_since"))
        )
        for row in _rows(oldest_unknown):
            if row["age"] is not None:
                lookup_age.add_metric([row["tenant__slug"]], row["age"].total_seconds())
        yield lookup_age
        approvals = GaugeMetricFamily(
            "agent_ledger_oldest_pending_approval_age_seconds",
            "age of the oldest approval waiting for a human",
            labels=["tenant"],
        )
        pending = self._of(still_open())
        oldest_pending = pending.values("tenant__slug").annotate(
            age=elapsed_since(Min("created_at"))
        )
        for row in _rows(oldest_pending):
            approvals.add_metric([row["tenant__slug"]], row["age"].total_seconds())
        yield approvals
        yield self._compensations()

    def _compensations(self) -> Metric:
        """Compensations the ledger holds now, by the state of their own record
        (``compensated`` once succeeded). A gauge: a compensation goes with the action it
        undid when TTL cleanup deletes that action's record."""
        family = GaugeMetricFamily(
            "agent_ledger_compensations",
            "compensations held now, by state (compensated, reserved, unknown, ...)",
            labels=["tenant", "state"],
        )
        own_record = IdempotencyRecord.objects.filter(
            tenant_id=OuterRef("tenant_id"), key=OuterRef("key")
        ).values("state")[:1]
        rows = (
            self._of(Compensation.objects.all())
            .annotate(record_state=Subquery(own_record))
            .values("tenant__slug", "record_state")
            .annotate(n=Count("pk"))
        )
        for row in _rows(rows):
            label = compensation_state(row["record_state"])
            family.add_metric([row["tenant__slug"], label], row["n"])
        return family

    def _rollout_steps(self) -> Iterator[Metric]:
        """Every step of the open plans and of those finished in the last day: its share,
        its state, and what its last analysis measured (samples, the candidate's metrics,
        each threshold's observed value)."""
        labels = ["tenant", "plan", "candidate", "step"]
        share = GaugeMetricFamily(
            "agent_ledger_rollout_step_share_ratio",
            "a step's share of new runs (0-1)",
            labels=labels,
        )
        state = GaugeMetricFamily(
            "agent_ledger_rollout_step_state", "1 for a step's state", labels=[*labels, "state"]
        )
        samples = GaugeMetricFamily(
            "agent_ledger_rollout_step_samples",
            "keyed requests of the candidate during the step (last analysis)",
            labels=labels,
        )
        measured = GaugeMetricFamily(
            "agent_ledger_rollout_step_metric",
            "the candidate's metric during the step (last analysis)",
            labels=[*labels, "metric"],
        )
        observed = GaugeMetricFamily(
            "agent_ledger_rollout_step_threshold_observed",
            "a threshold's observed value at the step's last analysis",
            labels=[*labels, "metric", "verdict"],
        )
        recent = Q(plan__state__in=RolloutPlan.OPEN_STATES) | Q(
            plan__finished_at__gte=Now() - timedelta(days=1)
        )
        steps = self._of(RolloutStep.objects.filter(recent), "plan__tenant").values(
            "plan_id",
            "plan__tenant__slug",
            "plan__candidate__label",
            "position",
            "share_bp",
            "state",
            "analysis",
        )
        for row in steps:
            values = [
                row["plan__tenant__slug"],
                str(row["plan_id"]),
                row["plan__candidate__label"],
                str(row["position"]),
            ]
            share.add_metric(values, row["share_bp"] / rollouts.FULL)
            state.add_metric([*values, row["state"]], 1)
            analysis = row["analysis"] or {}
            if analysis:
                samples.add_metric(values, analysis.get("samples", 0))
            for name, value in (analysis.get("metrics") or {}).items():
                measured.add_metric([*values, name], value)
            for verdict in analysis.get("verdicts") or []:
                if verdict.get("observed") is not None:
                    observed.add_metric(
                        [*values, verdict["metric"], verdict["verdict"]], verdict["observed"]
                    )
        yield from (share, state, samples, measured, observed)


def _readable_tenants(request: HttpRequest) -> list[int] | None:
    """The tenants this request may read: None for every tenant (the scraper's token), else
    the ids of those a signed-in user administers; none at all is a refusal, kept."""
    token = settings.METRICS_TOKEN
    header = request.headers.get("Authorization", "")
    user = getattr(request, "user", None)
    if token and header.startswith("Bearer "):
        if hmac.compare_digest(header.removeprefix("Bearer ").encode(), token.encode()):
            return None
    elif user is not None and user.is_authenticated:
        tenant_ids = list(administered_tenants(request).values_list("pk", flat=True))
        if not tenant_ids:
            _refused(request, Reason.ROLE, "an admin of no tenant")
        return tenant_ids
    _refused(request, Reason.UNAUTHENTICATED, "no valid bearer token")
    return []


def _refused(request: HttpRequest, reason: Reason, why: str) -> None:
    record_denial(
        request,
        reason=reason,
        tenant=None,
        target=("page", request.path[:100]),
        detail=f"{request.method} {request.path}: {why}",
    )


@require_GET
def metrics_view(request: HttpRequest) -> HttpResponse:
    tenant_ids = _readable_tenants(request)
    if tenant_ids == []:
        response = HttpResponse("authentication required\n", status=401, content_type="text/plain")
        response["WWW-Authenticate"] = 'Bearer realm="metrics"'
        return response
    registry = CollectorRegistry(auto_describe=True)
    registry.register(LedgerCollector(tenant_ids))
    return HttpResponse(generate_latest(registry), content_type=CONTENT_TYPE_LATEST)
