"""Reads for the console pages (no writes here; writes go through ledger services)."""

from __future__ import annotations

import copy
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.db.models import (
    BooleanField,
    Count,
    DurationField,
    ExpressionWrapper,
    F,
    Min,
    OuterRef,
    Q,
    QuerySet,
    Subquery,
)
from django.db.models.functions import Now

from console import claims
from console.filters import tool_matches
from ledger.clock import db_now, elapsed_since
from ledger.combinations import RollbackReport
from ledger.domain import Decision, EscalationKind, ObservationCode, RecordState, ReplayPolicy
from ledger.models import (
    ApprovalRequest,
    AuditEvent,
    Compensation,
    IdempotencyRecord,
    LedgerEntry,
    RolloutPlan,
    Run,
    Tenant,
    VersionCombination,
    WritePlan,
)
from ledger.records.escalation import escalated_as
from ledger.records.reserve import state_table_answer
from ledger.records.transitions import REPORTED, Outcome
from ledger.services.approvals import still_open


@dataclass(frozen=True)
class Queue:
    key: str
    count: int
    age: timedelta | None  # how long the oldest has waited, by the database's clock; None: empty


def inbox(tenant: Tenant) -> dict[str, object]:
    """What needs a human now, with counts and ages, and whether look-ups are running (four
    indexed queries and the scheduler's heartbeat)."""
    approvals = still_open(ApprovalRequest.objects.filter(tenant=tenant)).aggregate(
        n=Count("pk"), age=elapsed_since(Min("created_at"))
    )
    unknown = IdempotencyRecord.objects.filter(tenant=tenant, state=RecordState.UNKNOWN)
    unknown_counts = unknown.aggregate(
        n=Count("pk"),
        age=elapsed_since(Min("uncertain_since")),
        conflicts=Count("pk", filter=WRITE_CONFLICTS),
        conflicts_age=elapsed_since(Min("uncertain_since", filter=WRITE_CONFLICTS)),
    )
    halted = list(
        VersionCombination.objects.filter(tenant=tenant, state="halted").order_by("-halted_at")
    )
    return {
        "reconciler": reconciler(),
        "approvals": Queue("approvals", approvals["n"], approvals["age"]),
        "unknown": Queue("unknown", unknown_counts["n"], unknown_counts["age"]),
        "conflicts": Queue(
            "conflicts", unknown_counts["conflicts"], unknown_counts["conflicts_age"]
        ),
        "halted": halted,
    }


#: The scheduler sweeps every 10 s; this long without one means look-ups have stopped.
#: The unknown calls escalated as write conflicts (the inbox's count and the queue's filter).
WRITE_CONFLICTS = escalated_as(EscalationKind.WRITE_CONFLICT)

SCHEDULER_STALE_AFTER = timedelta(minutes=2)


@dataclass(frozen=True)
class Reconciler:
    running: bool
    last_seen: datetime | None  # None: no worker has ever run the scheduler


def reconciler() -> Reconciler:
    """Whether unknown calls are being looked up: the scheduler's heartbeat is recent."""
    from reconcile.models import Heartbeat

    # Stamped and judged by the database's clock (ledger.clock), in the statement that reads it.
    row = (
        Heartbeat.objects.filter(name=Heartbeat.SCHEDULER)
        .annotate(
            fresh=ExpressionWrapper(
                Q(beat_at__gt=Now() - SCHEDULER_STALE_AFTER), output_field=BooleanField()
            )
        )
        .values_list("beat_at", "fresh")
        .first()
    )
    last, fresh = row if row is not None else (None, False)
    return Reconciler(running=fresh, last_seen=last)


#: What the approvals queue shows of a request: only these are read (with its record, call,
#: run, combination, claim and claimant, over 100 columns a row otherwise).
APPROVAL_LIST_FIELDS = (
    "created_at",
    "expires_at",
    "requested_by",
    "record__tool__name",
    "entry__run__run_id",
    "entry__combination__label",
    "claim__claimed_at",
    "claim__user__username",
)


#: The most approvals the queue shows at once (its CSV export has them all).
APPROVAL_PAGE = 200


def _waiting_approvals(
    tenant: Tenant, *, order: str = "oldest", tool: str = "", window: Q | None = None
) -> QuerySet[ApprovalRequest]:
    """The approvals still waiting for an approver (``still_open``), of ``tool`` (any part of
    its name), requested in ``window``, oldest or newest first; read with what the queue
    shows, how long each has waited and has left (``waited``, ``expires_in``) and whether its
    claim is live (``claim_live``), by the database's clock."""
    ordering = "created_at" if order == "oldest" else "-created_at"
    pending = still_open(ApprovalRequest.objects.filter(tenant=tenant))
    pending = pending.filter(tool_matches(tool, "record__tool__name"), window or Q())
    # Each action's write plan (its first call's), read in the same statement: its path, and
    # its diff for the change's size. None for an action without one.
    plan = IdempotencyRecord.write_plans(id=OuterRef("record_id"))
    return (
        pending.select_related(
            "record__tool",
            "entry__run",
            "entry__combination",
            "claim__user",
        )
        .only(*APPROVAL_LIST_FIELDS)
        .annotate(
            plan_path=Subquery(plan.values("path")[:1]),
            plan_diff=Subquery(plan.values("diff")[:1]),
            expires_in=ExpressionWrapper(F("expires_at") - Now(), output_field=DurationField()),
            waited=elapsed_since("created_at"),
            claim_live=claims.live("claim__"),
        )
        .order_by(ordering, "pk")
    )


def pending_approvals(
    tenant: Tenant, *, order: str = "oldest", tool: str = "", window: Q | None = None
) -> list[ApprovalRequest]:
    """The queue: the first ``APPROVAL_PAGE`` of ``_waiting_approvals``."""
    waiting = _waiting_approvals(tenant, order=order, tool=tool, window=window)
    return list(waiting[:APPROVAL_PAGE])


def all_pending_approvals(
    tenant: Tenant, *, order: str = "oldest", tool: str = "", window: Q | None = None
) -> QuerySet[ApprovalRequest]:
    """Every approval the queue's filters match, in its order (for export)."""
    return _waiting_approvals(tenant, order=order, tool=tool, window=window)


def queue_neighbours(approval: ApprovalRequest) -> dict[str, int | None]:
    """The approvals still waiting just before and after this one, oldest first (for j/k and
    the previous/next links on the detail page)."""
    pending = still_open(ApprovalRequest.objects.filter(tenant_id=approval.tenant_id))
    pending = pending.exclude(pk=approval.pk)
    older = Q(created_at__lt=approval.created_at) | Q(
        created_at=approval.created_at, pk__lt=approval.pk
    )
    previous = pending.filter(older).order_by("-created_at", "-pk").values_list("pk", flat=True)
    following = pending.exclude(older).order_by("created_at", "pk").values_list("pk", flat=True)
    return {"previous": previous.first(), "next": following.first()}


def approval_timeline(approval: ApprovalRequest) -> list[AuditEvent]:
    return list(
        AuditEvent.objects.filter(
            Q(target_type="approvalrequest", target_id=str(approval.pk))
            | Q(target_type="idempotencyrecord", target_id=str(approval.record_id))
        ).order_by("created_at")[:100]
    )


#: Kinds of unknown call the queue filters on, and which calls each one is: escalated to a
#: human (for any reason, or for one ``EscalationKind``), or still looked up automatically.
UNKNOWN_KINDS = {
    "escalated": IdempotencyRecord.escalated_q(),
    **{kind.value: escalated_as(kind) for kind in EscalationKind},
    "automatic": ~IdempotencyRecord.escalated_q(),
}


#: What the queue shows of an unknown call: only these are read (a record has over 30 columns,
#: its result and error JSON among them).
UNKNOWN_LIST_FIELDS = (
    "key",
    "state",
    "uncertain_since",
    "reconcile_attempts",
    "escalated_at",
    "escalation_kind",
    "escalation_reason",
    "tool__name",
    "combination__label",
)


#: What the queue reads of each unknown call's latest approval request (``approval_<name>``):
#: enough for ``console.states.next_step`` to say what happens next and who does it.
LATEST_APPROVAL = {
    "id": "pk",
    "state": "state",
    "expires_at": "expires_at",
    "decided_by": "decided_by__username",
    "decided_at": "decided_at",
}


def _unknown(
    tenant: Tenant,
    *,
    tool: str = "",
    kind: str = "",
    combination: int | None = None,
    older_than: timedelta | None = None,
) -> QuerySet[IdempotencyRecord]:
    """The tenant's unknown calls of ``tool`` (any part of its name), of one ``UNKNOWN_KINDS``
    kind, under ``combination``, unknown for longer than ``older_than``; read as the queue
    shows them, with the input of each one's first call (``first_input``)."""
    unknown = IdempotencyRecord.objects.filter(tenant=tenant, state=RecordState.UNKNOWN)
    unknown = unknown.filter(tool_matches(tool))
    if kind:
        unknown = unknown.filter(UNKNOWN_KINDS[kind])
    if combination is not None:
        unknown = unknown.filter(combination_id=combination)
    if older_than is not None:
        unknown = unknown.filter(uncertain_since__lt=db_now() - older_than)
    first_call = LedgerEntry.objects.filter(record_id=OuterRef("pk")).order_by("pk")
    latest = ApprovalRequest.objects.filter(record_id=OuterRef("pk")).order_by("-pk")
    return (
        unknown.select_related("tool", "combination")
        .only(*UNKNOWN_LIST_FIELDS)
        .annotate(
            first_input=Subquery(first_call.values("input")[:1]),
            plan_path=Subquery(IdempotencyRecord.write_plans(id=OuterRef("pk")).values("path")[:1]),
            **{
                f"approval_{name}": Subquery(latest.values(path)[:1])
                for name, path in LATEST_APPROVAL.items()
            },
        )
    )


def unknown_calls(
    tenant: Tenant,
    *,
    limit: int,
    after: int | None = None,
    tool: str = "",
    kind: str = "",
    combination: int | None = None,
    older_than: timedelta | None = None,
) -> list[IdempotencyRecord] | None:
    """The oldest unknown calls first (they have waited longest), ``limit`` of them after the
    call ``after`` (keyset on (uncertain_since, id), the order of its index), filtered as
    ``_unknown`` filters. None when ``after`` is not such a call of this tenant (any more)."""
    unknown = _unknown(tenant, tool=tool, kind=kind, combination=combination, older_than=older_than)
    if after is not None:
        since = unknown.filter(pk=after).values_list("uncertain_since", flat=True).first()
        if since is None:
            return None
        unknown = unknown.filter(
            Q(uncertain_since__gt=since) | Q(uncertain_since=since, pk__gt=after)
        )
    return list(unknown.order_by("uncertain_since", "pk")[:limit])


def unknown_call(tenant: Tenant, pk: int) -> IdempotencyRecord | None:
    """The tenant's unknown call ``pk`` as the queue reads it (with its latest approval), or
    None when it is no unknown call of this tenant (any more)."""
    return _unknown(tenant).filter(pk=pk).first()


def all_unknown_calls(
    tenant: Tenant,
    *,
    tool: str = "",
    kind: str = "",
    combination: int | None = None,
    older_than: timedelta | None = None,
) -> QuerySet[IdempotencyRecord]:
    """Every unknown call ``unknown_calls`` would page through, in its order (for export)."""
    unknown = _unknown(tenant, tool=tool, kind=kind, combination=combination, older_than=older_than)
    return unknown.order_by("uncertain_since", "pk")


@dataclass(frozen=True)
class RetryAnswer:
    """What a retry of a call would be told now: the decision and the observation (None: go
    ahead, the retry would run the tool)."""

    decision: Decision
    observation: dict[str, Any] | None


def retry_answer(entry: LedgerEntry, latest: ApprovalRequest | None) -> RetryAnswer:
    """What a retry of ``entry`` (a new call with its key and input) would be told now: the
    state table's answer from its record as it is (``records.reserve.state_table_answer``),
    told as ``record_call`` tells a duplicate (``ledger.calls.observation_for``), with the
    record's ``latest`` approval request joined if open, or standing if it rejected this
    action. A read: nothing is reserved, counted or asked for."""
    from ledger.calls import observation_for
    from ledger.calls.approval import rejects

    record = entry.record
    assert record is not None
    answer = state_table_answer(record, entry.input_hash, ReplayPolicy(entry.replay_policy))
    decision, code, approval = answer.decision, answer.code, None
    if decision is Decision.APPROVAL_REQUIRED and latest is not None:
        if latest.state in ApprovalRequest.OPEN_STATES:
            approval = latest
        elif rejects(latest, entry, record):
            approval, decision, code = latest, Decision.FORBIDDEN, ObservationCode.APPROVAL_REJECTED
    retry = LedgerEntry(
        call_id=entry.call_id,
        tool=entry.tool,
        idempotency=entry.idempotency,
        replay_policy=entry.replay_policy,
        idempotency_key=entry.idempotency_key,
        record=record,
        decision=decision,
        observation_code=code.value if code else "",
    )
    return RetryAnswer(decision, observation_for(retry, approval, next_action=answer.next_action))


#: The audit action of each report a holder makes, and the outcome it reported.
REPORT_ACTIONS = {transition.action: outcome for outcome, transition in REPORTED.items()}


@dataclass(frozen=True)
class ReportAnswer:
    """What the runtime was told when it reported how an executed call ended: the outcome it
    reported and the observation it got (None when it cannot be told exactly any more)."""

    outcome: Outcome
    observation: dict[str, Any] | None


def report_answer(entry: LedgerEntry) -> ReportAnswer | None:
    """The answer to ``entry``'s own report (``calls.complete_call`` tells the call as it stands
    once the report is recorded), rebuilt from the report's audit event (the one whose token
    is the call's) and the record as it was then: an uncertain outcome is told from the call's
    class alone, a success from the record's result (a succeeded record never changes), a
    failure from the record's error while no later execution has replaced it. None when the
    call has not reported (or its lease lapsed first)."""
    from ledger.calls import observation_for

    record = entry.record
    if record is None or entry.fencing_token is None:
        return None
    event = (
        AuditEvent.objects.filter(
            tenant_id=entry.tenant_id,
            target_type="idempotencyrecord",
            target_id=str(record.pk),
            action__in=list(REPORT_ACTIONS),
            before__fencing_token=entry.fencing_token,
        )
        .order_by("pk")
        .first()
    )
    if event is None:
        return None
    outcome = REPORT_ACTIONS[event.action]
    then = copy.copy(record)
    if outcome is Outcome.UNCERTAIN:
        then.state = RecordState.UNKNOWN
    elif RecordState(record.state) is not REPORTED[outcome].target or (
        record.fencing_token != entry.fencing_token
    ):
        return ReportAnswer(outcome, None)  # executed again, or settled otherwise, since
    reported = copy.copy(entry)
    reported.record = then
    return ReportAnswer(outcome, observation_for(reported, None))


def call_page(entry: LedgerEntry) -> dict[str, object]:
    """Everything about one call: its action's write plan, look-ups and approvals, what a
    retry of it would be told now (``retry_answer``; what the model was told with the call's
    own decision is kept with it, ``LedgerEntry.observation``), the number of the action's
    dedup hits, and the audit events of the action and the call's approvals, oldest first."""
    from reconcile.models import ReconcileAttempt

    approvals = list(
        (
            ApprovalRequest.objects.filter(entry=entry)
            if entry.record_id is None
            else ApprovalRequest.objects.filter(record_id=entry.record_id)
        )
        .select_related(*APPROVAL_STATE_READS)
        .order_by("created_at")
    )
    targets = Q(target_type="ledgerentry", target_id=str(entry.pk)) | Q(
        target_type="approvalrequest", target_id__in=[str(a.pk) for a in approvals]
    )
    if entry.record_id is not None:
        targets |= Q(target_type="idempotencyrecord", target_id=str(entry.record_id))
    return {
        # The action's plan (a retry's entry has none of its own); a call without a record
        # (refused, or a shadow run's dry run) shows its own.
        "plan": (
            entry.record.write_plan
            if entry.record is not None
            else WritePlan.objects.filter(entry=entry).first()
        ),
        "attempts": list(
            ReconcileAttempt.objects.filter(record_id=entry.record_id).order_by("created_at")
        )
        if entry.record_id
        else [],
        "approvals": approvals,
        "report": report_answer(entry),
        "retry": retry_answer(entry, approvals[-1] if approvals else None)
        if entry.record_id is not None
        else None,
        "events": list(
            AuditEvent.objects.filter(targets, tenant_id=entry.tenant_id).order_by("created_at")[
                :200
            ]
        ),
    }


#: What ``console.states.approval_status`` reads of an approval, besides its own row.
APPROVAL_STATE_READS = ("record", "entry__tool", "entry__combination", "entry__run__combination")


def combination_choices(tenant: Tenant) -> list[tuple[str, str]]:
    """The tenant's newest 100 combinations as a filter's choices (id, label), after "any"."""
    from django.utils.translation import gettext

    return [("", gettext("any"))] + [
        (str(pk), label)
        for pk, label in VersionCombination.objects.filter(tenant=tenant)
        .order_by("-pk")
        .values_list("pk", "label")[:100]
    ]


def record_page(record: IdempotencyRecord) -> dict[str, object]:
    """Everything about one action (an idempotency record): its calls, its write plan (its
    first call's), look-ups, approvals, compensation, and the audit events of the action, its
    calls and its approvals, oldest first."""
    from reconcile.models import ReconcileAttempt

    entries = list(record.entries.select_related("run").order_by("created_at", "pk")[:100])
    approvals = list(
        ApprovalRequest.objects.filter(record=record)
        .select_related(*APPROVAL_STATE_READS)
        .order_by("created_at")
    )
    targets = (
        Q(target_type="idempotencyrecord", target_id=str(record.pk))
        | Q(target_type="ledgerentry", target_id__in=[str(e.pk) for e in entries])
        | Q(target_type="approvalrequest", target_id__in=[str(a.pk) for a in approvals])
    )
    return {
        "entries": entries,
        "plan": record.write_plan,
        "attempts": list(ReconcileAttempt.objects.filter(record=record).order_by("created_at")),
        "approvals": approvals,
        "compensation": Compensation.objects.filter(original=record).select_related("tool").first(),
        "events": list(
            AuditEvent.objects.filter(targets, tenant_id=record.tenant_id).order_by(
                "created_at", "pk"
            )[:200]
        ),
    }


@dataclass(frozen=True)
class FileNow:
    """A conditional write's file as the worker last read it, when that look-up kept a
    snapshot (a write conflict's: ``reconcile.file_snapshots``), for the human settling it."""

    at: datetime
    current_hash: str
    size: int
    content: str | None
    plan_applies: bool | None
    applying_now: str


def file_now(attempts: list[Any]) -> FileNow | None:
    """What the newest look-up of the file among ``attempts`` (oldest first) kept of it, if
    it kept a snapshot (None for restricted data, which keeps only a hash)."""
    from reconcile.models import ReconcileAttempt

    looked = [a for a in attempts if a.kind == ReconcileAttempt.Kind.FILE_HASH]
    evidence = looked[-1].evidence if looked else None
    if not isinstance(evidence, dict) or not isinstance(evidence.get("snapshot"), dict):
        return None
    kept = evidence["snapshot"]
    return FileNow(
        at=looked[-1].created_at,
        current_hash=str(evidence.get("current_hash", "")),
        size=int(kept.get("size") or 0),
        content=kept.get("content"),
        plan_applies=kept.get("plan_applies"),
        applying_now=str(kept.get("applying_now") or ""),
    )


def combination_page(combination: VersionCombination) -> dict[str, object]:
    """One combination's runs (newest 20, and how many by status), its rollout plans, the
    combination it replaced, and its audit events, oldest first."""
    runs = Run.objects.filter(combination=combination)
    return {
        "runs": list(runs.order_by("-pk")[:20]),
        "run_counts": dict(
            runs.order_by().values_list("status").annotate(n=Count("pk")).values_list("status", "n")
        ),
        "rollouts": list(RolloutPlan.objects.filter(candidate=combination).order_by("-pk")[:10]),
        "events": list(
            AuditEvent.objects.filter(
                tenant_id=combination.tenant_id,
                target_type="versioncombination",
                target_id=str(combination.pk),
            ).order_by("created_at", "pk")[:200]
        ),
    }


def rollback_changes(tenant: Tenant, report: RollbackReport) -> dict[str, list[Any]]:
    """What a rollback changes (or, in a preview, would change), as they are now: the runs it
    halts, the approvals it invalidates, the unknown calls it queues for look-up, those that
    need a human (``(kind, reason, record)``) and the calls still executing. Three queries."""
    keys = [*report.executing, *report.unknown, *(i["key"] for i in report.needs_human)]
    records = {
        record.key: record
        for record in IdempotencyRecord.objects.filter(tenant=tenant, key__in=keys)
        .select_related("tool")
        .order_by("pk")
    }
    return {
        "runs": list(
            Run.objects.filter(tenant=tenant, run_id__in=report.halted_runs).order_by("run_id")
        ),
        "approvals": list(
            ApprovalRequest.objects.filter(tenant=tenant, pk__in=report.invalidated_approvals)
            .select_related("record__tool")
            .order_by("pk")
        ),
        "queued": [records[key] for key in report.queued_for_lookup if key in records],
        "needs_human": [
            (item["kind"], item.get("reason", ""), records[item["key"]])
            for item in report.needs_human
            if item["key"] in records
        ],
        "executing": [records[key] for key in report.executing if key in records],
    }
