"""Dedup and safety metrics (DESIGN section 9), kept as rollups so reads stay cheap.

``roll_up`` reads what happened since it last ran from two append-only sources, new ledger
entries (requests and decisions) and new audit events of records (executions, outcomes that
became unknown, reconciliation attempts), and adds it to 5-minute ``MetricBucket`` rows per
tenant, combination and tool, and ``ReconcileBucket`` rows per tenant and look-up outcome.
Dashboards, thresholds and ``/metrics`` read the buckets, never the ledger. TTL cleanup deletes
records (and their attempts), never buckets or their sources, so a total read from the buckets
never goes down.

Definitions:
- keyed request: a call with an idempotency key; dedup hit: a keyed request answered from an
  existing record without executing (recorded result, wait, approval, refusal; a conflict is
  not a hit; a shadow run's dry run reserves nothing and is not a keyed request), the one
  definition ``LedgerEntry.DEDUP_HIT`` (``LedgerEntry.dedup_hit`` for one entry) that the
  console's badges and counts and each record's ``duplicate_hits`` agree with; dedup hit
  rate = hits / keyed requests;
- uncertain results: records in ``unknown`` now, and executions that became unknown per window;
- duplicate side effect: an execution of an action classified non-idempotent when an earlier
  execution of it may already have had its effect (it was not a known failure). Zero unless
  something is misclassified or overridden: that is what the metric is there to catch.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.db import transaction
from django.db.models import BooleanField, ExpressionWrapper, F, Sum
from django.db.models.functions import TruncHour

from ledger.clock import db_now
from ledger.domain import Decision, RecordState
from ledger.models import (
    AuditEvent,
    IdempotencyRecord,
    LedgerEntry,
    MetricBucket,
    MetricCursor,
    ReconcileBucket,
    Tenant,
)

BUCKET = timedelta(minutes=5)
#: The audit actions of the transitions that start an execution, and of those that make an
#: outcome unknown: every one ``records.transitions.DECLARED`` has into ``executing`` and into
#: ``unknown`` (the records sit above this module, so a test holds the two equal).
EXECUTION_ACTIONS = ("record.started", "record.replayed")
UNCERTAIN_ACTIONS = (
    "record.lease_expired",
    "record.unknown",
    "record.report_contradicts_settlement",
)
#: The audit action of one reconciliation attempt (``reconcile.services`` writes it, with the
#: attempt's ``outcome`` in ``after``): the rollup counts attempts from these events, which
#: stay, not from the attempts' rows, which TTL cleanup deletes with their record.
RECONCILE_ATTEMPT_ACTION = "reconcile.attempt"
COUNTERS = (
    "keyed_requests",
    "dedup_hits",
    "executions",
    "became_uncertain",
    "duplicate_side_effects",
    *(f"decided_{d.value}" for d in Decision),
)

Key = tuple[int, int | None, str, datetime]
AttemptKey = tuple[int, str, datetime]  # tenant, outcome, bucket


def bucket_of(moment: datetime) -> datetime:
    seconds = int(BUCKET.total_seconds())
    return datetime.fromtimestamp(int(moment.timestamp()) // seconds * seconds, tz=moment.tzinfo)


def _cursor(name: str) -> MetricCursor:
    MetricCursor.objects.get_or_create(name=name)
    return MetricCursor.objects.select_for_update().get(name=name)


def roll_up(*, batch: int = 20_000) -> int:
    """Fold new entries and record events into the buckets; returns how many were read.

    One rollup at a time (the cursor rows are locked), so concurrent runs never count twice.
    """
    with transaction.atomic():
        entries_cursor, events_cursor = _cursor("entries"), _cursor("record_events")
        counts: dict[Key, dict[str, int]] = defaultdict(lambda: defaultdict(int))
        attempts: dict[AttemptKey, int] = defaultdict(int)
        read = _fold_entries(entries_cursor, counts, batch)
        read += _fold_events(events_cursor, counts, attempts, batch)
        for (tenant_id, outcome, start), value in attempts.items():
            tally, _ = ReconcileBucket.objects.get_or_create(
                tenant_id=tenant_id, outcome=outcome, bucket_start=start
            )
            ReconcileBucket.objects.filter(pk=tally.pk).update(attempts=F("attempts") + value)
        for (tenant_id, combination_id, tool_name, start), values in counts.items():
            bucket, _ = MetricBucket.objects.get_or_create(
                tenant_id=tenant_id,
                combination_id=combination_id,
                tool_name=tool_name,
                bucket_start=start,
            )
            MetricBucket.objects.filter(pk=bucket.pk).update(
                **{name: F(name) + value for name, value in values.items()}
            )
        entries_cursor.save(update_fields=["last_id"])
        events_cursor.save(update_fields=["last_id"])
    return read


def _fold_entries(cursor: MetricCursor, counts: dict[Key, dict[str, int]], batch: int) -> int:
    rows = list(
        LedgerEntry.objects.filter(pk__gt=cursor.last_id)
        .order_by("pk")
        .values_list(
            "pk",
            "tenant_id",
            "combination_id",
            "tool__name",
            "created_at",
            "decision",
            "idempotency_key",
            ExpressionWrapper(LedgerEntry.DEDUP_HIT, output_field=BooleanField()),
        )[:batch]
    )
    for pk, tenant_id, combination_id, tool, created, decision, key, hit in rows:
        values = counts[(tenant_id, combination_id, tool, bucket_of(created))]
        values[f"decided_{decision}"] += 1
        if key and decision != Decision.SHADOW_DRY_RUN:  # a dry run reserves no key
            values["keyed_requests"] += 1
            values["dedup_hits"] += hit
        cursor.last_id = pk
    return len(rows)


def _fold_events(
    cursor: MetricCursor,
    counts: dict[Key, dict[str, int]],
    attempts: dict[AttemptKey, int],
    batch: int,
) -> int:
    events = list(
        AuditEvent.objects.filter(
            pk__gt=cursor.last_id,
            target_type="idempotencyrecord",
            action__in=(*EXECUTION_ACTIONS, *UNCERTAIN_ACTIONS, RECONCILE_ATTEMPT_ACTION),
        )
        .order_by("pk")
        .values_list("pk", "tenant_id", "target_id", "action", "before", "after", "created_at")[
            :batch
        ]
    )
    records = {
        str(r["pk"]): r
        for r in IdempotencyRecord.objects.filter(
            pk__in={
                int(e[2]) for e in events if e[3] != RECONCILE_ATTEMPT_ACTION and e[2].isdigit()
            }
        ).values("pk", "tenant_id", "combination_id", "tool__name")
    }
    for pk, tenant_id, target_id, action, before, after, created in events:
        cursor.last_id = pk
        if action == RECONCILE_ATTEMPT_ACTION:
            # Per tenant, from the event alone: the record may be gone by now.
            outcome = (after or {}).get("outcome")
            if tenant_id is not None and outcome:
                attempts[(tenant_id, outcome, bucket_of(created))] += 1
            continue
        record = records.get(target_id)
        if record is None:
            continue  # cleaned up since: its counts are in earlier buckets already
        values = counts[
            (
                record["tenant_id"],
                record["combination_id"],
                record["tool__name"],
                bucket_of(created),
            )
        ]
        if action in UNCERTAIN_ACTIONS:
            values["became_uncertain"] += 1
            continue
        values["executions"] += 1
        prior = before or {}
        maybe_happened = prior.get("executions", 0) - prior.get("failed_executions", 0)
        # Whatever the action's classification: a tool classified wrongly (a runtime's read
        # that creates orders) is exactly the one whose second execution must be seen.
        if maybe_happened >= 1:
            values["duplicate_side_effects"] += 1
    return len(events)


def dedup_hit_rate(hits: int | None, keyed_requests: int | None) -> float:
    """Dedup hits over keyed requests (DESIGN section 9); 0 where nothing was keyed."""
    return (hits or 0) / keyed_requests if keyed_requests else 0.0


@dataclass
class Summary:
    keyed_requests: int = 0
    dedup_hits: int = 0
    executions: int = 0
    became_uncertain: int = 0
    duplicate_side_effects: int = 0
    uncertain_now: int = 0
    decisions: dict[str, int] = field(default_factory=dict)

    @property
    def dedup_hit_rate(self) -> float:
        return dedup_hit_rate(self.dedup_hits, self.keyed_requests)

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "dedup_hit_rate": round(self.dedup_hit_rate, 4)}


def _buckets(
    tenant: Tenant,
    *,
    since: datetime | None,
    combination_id: int | None = None,
    tool: str | None = None,
) -> Any:
    query = MetricBucket.objects.filter(tenant=tenant)
    if since is not None:
        query = query.filter(bucket_start__gte=bucket_of(since))
    if combination_id is not None:
        query = query.filter(combination_id=combination_id)
    if tool is not None:
        query = query.filter(tool_name=tool)
    return query


def _summary(row: dict[str, Any]) -> Summary:
    return Summary(
        keyed_requests=row["keyed_requests"] or 0,
        dedup_hits=row["dedup_hits"] or 0,
        executions=row["executions"] or 0,
        became_uncertain=row["became_uncertain"] or 0,
        duplicate_side_effects=row["duplicate_side_effects"] or 0,
        decisions={d.value: row[f"decided_{d.value}"] or 0 for d in Decision},
    )


def _sums() -> dict[str, Sum]:
    return {name: Sum(name) for name in COUNTERS}


def summarize(
    tenant: Tenant,
    *,
    since: datetime | None = None,
    combination_id: int | None = None,
    tool: str | None = None,
) -> Summary:
    summary = _summary(
        _buckets(tenant, since=since, combination_id=combination_id, tool=tool).aggregate(**_sums())
    )
    unknown = IdempotencyRecord.objects.filter(tenant=tenant, state=RecordState.UNKNOWN)
    if combination_id is not None:
        unknown = unknown.filter(combination_id=combination_id)
    if tool is not None:
        unknown = unknown.filter(tool__name=tool)
    summary.uncertain_now = unknown.count()
    return summary


def by_combination(tenant: Tenant, *, since: datetime | None) -> dict[int | None, Summary]:
    rows = _buckets(tenant, since=since).values("combination_id").annotate(**_sums())
    result = {row["combination_id"]: _summary(row) for row in rows}
    unknown = (
        IdempotencyRecord.objects.filter(tenant=tenant, state=RecordState.UNKNOWN)
        .values_list("combination_id")
        .annotate(n=Sum(1))
    )
    for combination_id, count in unknown:
        result.setdefault(combination_id, Summary()).uncertain_now = count
    return result


def by_tool(
    tenant: Tenant, *, since: datetime | None, combination_id: int | None = None
) -> dict[str, Summary]:
    rows = (
        _buckets(tenant, since=since, combination_id=combination_id)
        .values("tool_name")
        .annotate(**_sums())
    )
    return {row["tool_name"]: _summary(row) for row in rows}


def series(
    tenant: Tenant, *, since: datetime, combination_id: int | None = None, tool: str | None = None
) -> list[dict[str, Any]]:
    """One point per 5-minute bucket (only buckets with activity)."""
    rows = (
        _buckets(tenant, since=since, combination_id=combination_id, tool=tool)
        .values("bucket_start")
        .annotate(**_sums())
        .order_by("bucket_start")
    )
    return [{"bucket_start": row["bucket_start"], **_summary(row).as_dict()} for row in rows]


def series_by_combination(
    tenant: Tenant, *, since: datetime, tool: str | None = None, hourly: bool = False
) -> dict[int | None, list[dict[str, Any]]]:
    """``series`` for every combination at once, in one query (the dashboard's charts);
    ``hourly`` sums each hour's buckets into one point (a week's chart)."""
    rows = (
        _buckets(tenant, since=since, tool=tool)
        .annotate(point=TruncHour("bucket_start") if hourly else F("bucket_start"))
        .values("combination_id", "point")
        .annotate(**_sums())
        .order_by("combination_id", "point")
    )
    result: dict[int | None, list[dict[str, Any]]] = {}
    for row in rows:
        point = {"bucket_start": row["point"], **_summary(row).as_dict()}
        result.setdefault(row["combination_id"], []).append(point)
    return result


def window_start(minutes: int) -> datetime:
    """The start of the last ``minutes``, by the database's clock (as buckets are stamped)."""
    return db_now() - timedelta(minutes=minutes)
