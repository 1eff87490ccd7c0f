"""Thresholds on the metrics: crossing one alerts (email, webhook) or halts the combination.

Seed 001: when dedup hit rate, uncertain results or duplicate side effects cross a threshold,
stop new runs first (fail closed). Evaluations may run concurrently (several beat-driven
workers, a manual trigger): each threshold row is locked while it is judged, an alert is raised
at most once per window, and a combination is halted exactly once.
"""

from __future__ import annotations

import logging
import math
from datetime import timedelta
from enum import StrEnum
from functools import partial
from typing import Any

from django.db import transaction

from ledger import combinations
from ledger.clock import db_now
from ledger.errors import InvalidInput
from ledger.models import AlertEvent, Tenant, Threshold, VersionCombination
from ledger.notifications import senders
from ledger.services import metrics
from ledger.services.audit import audit

logger = logging.getLogger(__name__)
JUDGED = (VersionCombination.State.ACTIVE, VersionCombination.State.CANARY)


MAX_WINDOW_MINUTES = 60 * 24 * 7


def add_threshold(*, tenant: Tenant, actor: str, source: str, **fields: Any) -> Threshold:
    """Bad input is an ``InvalidInput`` naming the field, and nothing is saved."""
    threshold = Threshold(tenant=tenant, **fields)
    problems = []
    if threshold.metric not in Threshold.Metric.values:
        problems.append("metric: one of " + ", ".join(Threshold.Metric.values))
    if threshold.action not in Threshold.Action.values:
        problems.append("action: alert or halt")
    above, window = threshold.above, threshold.window_minutes
    if not isinstance(above, int | float) or not math.isfinite(above) or above < 0:
        problems.append("above: a finite number, 0 or more")
    if not isinstance(window, int) or not 1 <= window <= MAX_WINDOW_MINUTES:
        problems.append(f"window_minutes: 1 to {MAX_WINDOW_MINUTES}")
    if threshold.email and (problem := senders.email_problem(threshold.email)):
        problems.append(f"email: {problem}")
    url = threshold.webhook_url
    if url and (problem := senders.webhook_problem(url, max_length=200)):
        problems.append(f"webhook_url: {problem}")
    if problems:
        raise InvalidInput(f"invalid threshold ({'; '.join(problems)})")
    with transaction.atomic():
        threshold.save(force_insert=True)
        audit(
            tenant=tenant,
            actor=actor,
            action="threshold.created",
            target=threshold,
            source=source,
            after=fields,
        )
    return threshold


def observed_value(threshold: Threshold, summary: metrics.Summary) -> float | None:
    """The metric's value over the window, or None when there is too little traffic to judge."""
    if threshold.metric == Threshold.Metric.DEDUP_HIT_RATE:
        if summary.keyed_requests < threshold.min_requests:
            return None
        return summary.dedup_hit_rate
    if threshold.metric == Threshold.Metric.UNCERTAIN_RESULTS:
        return float(summary.became_uncertain)
    return float(summary.duplicate_side_effects)


class Verdict(StrEnum):
    """A threshold's judgement of a combination over its window."""

    CROSSED = "crossed"
    MET = "met"
    TOO_FEW_SAMPLES = "too_few_samples"


def judge(threshold: Threshold, summary: metrics.Summary) -> tuple[Verdict, float | None]:
    """The threshold's verdict on ``summary`` and the value it judged: crossed only when the
    value is above the limit, and no verdict either way on too little traffic."""
    value = observed_value(threshold, summary)
    if value is None:
        return Verdict.TOO_FEW_SAMPLES, None
    return (Verdict.CROSSED if value > threshold.above else Verdict.MET), value


def evaluate(*, actor: str = "system") -> list[AlertEvent]:
    """Judge every enabled threshold against every active or canary combination."""
    raised: list[AlertEvent] = []
    for threshold_id in Threshold.objects.filter(enabled=True).values_list("pk", flat=True):
        raised.extend(_evaluate_one(threshold_id, actor))
    return raised


def _evaluate_one(threshold_id: int, actor: str) -> list[AlertEvent]:
    raised = []
    with transaction.atomic():
        threshold = (
            Threshold.objects.select_for_update().select_related("tenant").get(pk=threshold_id)
        )
        # The window by the database's clock: events are stamped by it (one clock).
        since = db_now() - timedelta(minutes=threshold.window_minutes)
        for combination in VersionCombination.objects.filter(
            tenant=threshold.tenant, state__in=JUDGED
        ):
            summary = metrics.summarize(
                threshold.tenant, since=since, combination_id=combination.pk
            )
            verdict, value = judge(threshold, summary)
            if verdict is not Verdict.CROSSED or value is None:  # crossed has a value
                continue
            recent = AlertEvent.objects.filter(
                threshold=threshold, combination=combination, created_at__gte=since
            ).exists()
            if recent:
                continue
            alert = AlertEvent.objects.create(
                tenant=threshold.tenant,
                threshold=threshold,
                combination=combination,
                metric=threshold.metric,
                observed=value,
                action=threshold.action,
            )
            if threshold.action == Threshold.Action.HALT:
                combinations.halt(
                    tenant=threshold.tenant,
                    combination_id=combination.pk,
                    actor=actor,
                    source="system",
                    reason=f"automatic halt: {threshold.metric} = {value:.4g} > "
                    f"{threshold.above:g} over {threshold.window_minutes} min",
                )
            transaction.on_commit(partial(deliver, alert))
            raised.append(alert)
    return raised


def deliver(alert: AlertEvent) -> None:
    """Send the alert by email and webhook; failures are recorded, never raised."""
    threshold = alert.threshold
    text = (
        f"Agent Ledger: {alert.metric} = {alert.observed:.4g} on combination "
        f"{alert.combination.label!r} crossed {threshold.above:g} "
        f"({threshold.window_minutes} min); action: {alert.action}."
    )
    delivery: dict[str, Any] = {}
    if threshold.email:
        try:
            delivery["email"] = senders.send_email(threshold.email, "Agent Ledger alert", text)
        except senders.DeliveryFailed as exc:
            delivery["email"] = f"failed: {exc}"
    if threshold.webhook_url:
        payload = {
            "metric": alert.metric,
            "observed": alert.observed,
            "threshold": threshold.above,
            "action": alert.action,
            "combination": alert.combination.label,
            "tenant": alert.tenant.slug,
            "text": text,
        }
        try:
            delivery["webhook"] = senders.post_webhook(threshold.webhook_url, payload)
        except senders.DeliveryFailed as exc:
            delivery["webhook"] = f"failed: {exc}"
    AlertEvent.objects.filter(pk=alert.pk).update(delivery=delivery)
    logger.warning("threshold crossed", extra={"alert": alert.pk, "delivery": delivery})
