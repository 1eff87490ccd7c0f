"""Version combinations, their metrics and thresholds (DESIGN sections 8 and 9)."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from django.http import HttpRequest
from ninja import Query, Router, Schema, Status
from pydantic import Field, StrictBool

from ledger import combinations
from ledger.api.auth import TokenAuth, caller_of
from ledger.api.parser import reject_unknown_query
from ledger.api.schemas import JsonInt, JsonNumber, PositiveInt, Problem, Strict
from ledger.combinations import thresholds
from ledger.errors import NotFound
from ledger.models import Tenant, Threshold, VersionCombination
from ledger.notifications import senders
from ledger.permissions import Scope
from ledger.services import metrics

# Changing a combination is a manager's (``Scope.LIFECYCLE``), as are its metrics, thresholds and
# rollouts; reading which combinations exist is any runtime's.
router = Router(tags=["combinations"], auth=TokenAuth(Scope.LIFECYCLE))
metrics_router = Router(tags=["metrics"], auth=TokenAuth(Scope.LIFECYCLE))
thresholds_router = Router(tags=["thresholds"], auth=TokenAuth(Scope.LIFECYCLE))
READ = TokenAuth(Scope.COMBINATIONS)
ERRORS = {400: Problem, 401: Problem, 404: Problem, 409: Problem}
Version = Field(min_length=1, max_length=200, pattern=r"^[^\x00-\x1f\x7f]+$")


class CombinationIn(Strict):
    label: str = Field(min_length=1, max_length=100, pattern=r"^[^\x00-\x1f\x7f]+$")
    model: str = Version
    prompt: str = Version
    rules: str = Version
    tool_schema: str = Version
    data_version: str = Version


class CombinationOut(Schema):
    id: int
    label: str
    model: str
    prompt: str
    rules: str
    tool_schema: str
    data_version: str
    fingerprint: str
    state: str
    canary_share_bp: int
    previous_id: int | None
    activated_at: datetime | None
    halted_at: datetime | None
    halted_reason: str


class ReasonIn(Strict):
    reason: str = Field(
        min_length=1, max_length=2000, pattern=r"\S", description="Kept in the audit log."
    )


class CanaryIn(Strict):
    share_bp: JsonInt = Field(
        ge=1,
        le=10_000,
        description="Basis points of new runs (1-10000). A canary is ended by retire.",
    )


class ShadowIn(Strict):
    share_bp: JsonInt = Field(
        default=10_000,
        ge=0,
        le=10_000,
        description="Basis points of live runs the runtime mirrors into shadow runs (0-10000).",
    )
    reason: str = Field(default="", max_length=2000, description="Kept in the audit log.")


class RollbackIn(Strict):
    reason: str = Field(min_length=1, max_length=2000)
    restore_id: PositiveInt | None = None
    dry_run: StrictBool = False


class RollbackStepOut(Schema):
    kind: str = Field(
        description="halt, restore, invalidate_approvals, queue_lookups, needs_human (a dry "
        "run's plan); halted, already_halted, runs_halted, restored, lookups_queued, "
        "needs_human (what a rollback did)"
    )
    args: dict[str, Any] = Field(description="The step's numbers and ids (count, combination).")


class NeedsHumanOut(Schema):
    kind: Literal["unknown_escalated", "no_lookup", "pending_approval"] = Field(
        description="An unknown call escalated to a human, an unknown call no worker can look "
        "up (no downstream adapter, or its workspace not registered), or an approval still "
        "pending."
    )
    key: str
    record_id: int
    reason: str
    approval_id: int | None = None


class RollbackOut(Schema):
    dry_run: bool
    combination: int
    restored: int | None
    halted_runs: list[str]
    executing: list[str]
    unknown: list[str]
    queued_for_lookup: list[str] = Field(
        description="Keys of the unknown calls sent (in a dry run: to be sent) to the look-up "
        "workers; the other unknown calls are in needs_human."
    )
    invalidated_approvals: list[int]
    needs_human: list[NeedsHumanOut]
    steps: list[RollbackStepOut]
    changes_nothing: bool = Field(
        description="Nothing was (in a dry run: would be) changed: the combination was halted "
        "already, no run ran under it, none is restored and no look-up is queued."
    )


def combination_out(c: VersionCombination) -> CombinationOut:
    return CombinationOut(
        id=c.pk,
        label=c.label,
        model=c.model,
        prompt=c.prompt,
        rules=c.rules,
        tool_schema=c.tool_schema,
        data_version=c.data_version,
        fingerprint=c.fingerprint,
        state=c.state,
        canary_share_bp=c.canary_share_bp,
        previous_id=c.previous_id,
        activated_at=c.activated_at,
        halted_at=c.halted_at,
        halted_reason=c.halted_reason,
    )


def _get(request: HttpRequest, combination_id: int) -> VersionCombination:
    found = VersionCombination.objects.filter(
        tenant=caller_of(request).tenant, pk=combination_id
    ).first()
    if found is None:
        raise NotFound(f"no version combination {combination_id}")
    return found


@router.post(
    "",
    response={200: CombinationOut, 201: CombinationOut, 400: Problem, 401: Problem},
    summary="Create a version combination",
)
def create(request: HttpRequest, payload: CombinationIn) -> Status:
    """Pin model, prompt, rules, tool schema and data version together (the same five
    versions always give the same combination). A new combination is ``new``: no run goes to
    it until it is put in shadow, made a canary or activated."""
    caller = caller_of(request)
    combination, created = combinations.create_combination(
        tenant=caller.tenant,
        actor=caller.identity,
        source="api",
        **payload.model_dump(),
    )
    return Status(201 if created else 200, combination_out(combination))


@router.get(
    "", response={200: list[CombinationOut], 401: Problem}, summary="List combinations", auth=READ
)
def list_combinations(request: HttpRequest) -> list[CombinationOut]:
    rows = VersionCombination.objects.filter(tenant=caller_of(request).tenant).order_by("pk")
    return [combination_out(c) for c in rows]


@router.get(
    "/{int:combination_id}",
    response={200: CombinationOut, 401: Problem, 404: Problem},
    summary="Get a combination",
    auth=READ,
)
def get(request: HttpRequest, combination_id: int) -> CombinationOut:
    return combination_out(_get(request, combination_id))


@router.post(
    "/{int:combination_id}/activate",
    response={200: CombinationOut, **ERRORS},
    summary="Make a combination the active one",
)
def activate(request: HttpRequest, combination_id: int) -> CombinationOut:
    caller = caller_of(request)
    combination = combinations.activate(
        tenant=caller.tenant, combination_id=combination_id, actor=caller.identity, source="api"
    )
    return combination_out(combination)


@router.post(
    "/{int:combination_id}/canary",
    response={200: CombinationOut, **ERRORS},
    summary="Set a combination's canary share",
)
def canary(request: HttpRequest, combination_id: int, payload: CanaryIn) -> CombinationOut:
    caller = caller_of(request)
    combination = combinations.set_canary(
        tenant=caller.tenant,
        combination_id=combination_id,
        share_bp=payload.share_bp,
        actor=caller.identity,
        source="api",
    )
    return combination_out(combination)


@router.post(
    "/{int:combination_id}/shadow",
    response={200: CombinationOut, **ERRORS},
    summary="Put a combination in shadow: it takes only shadow runs, which never execute a "
    "side effect",
)
def shadow(
    request: HttpRequest, combination_id: int, payload: ShadowIn | None = None
) -> CombinationOut:
    """The share of live runs to mirror into it is its ``canary_share_bp`` (every live run
    unless ``share_bp`` says otherwise); a runtime learns which live runs to mirror from each
    run's ``mirror``. Setting another share of a combination in shadow changes only the share;
    ``unshadow`` takes it out, back to where it came from."""
    caller = caller_of(request)
    chosen = payload or ShadowIn()
    combination = combinations.set_shadow(
        tenant=caller.tenant,
        combination_id=combination_id,
        actor=caller.identity,
        source="api",
        share_bp=chosen.share_bp,
        reason=chosen.reason,
    )
    return combination_out(combination)


@router.post(
    "/{int:combination_id}/halt",
    response={200: CombinationOut, **ERRORS},
    summary="Halt a combination: new runs and calls under it get RUN_HALTED",
)
def halt(request: HttpRequest, combination_id: int, payload: ReasonIn) -> CombinationOut:
    caller = caller_of(request)
    halted = combinations.halt(
        tenant=caller.tenant,
        combination_id=combination_id,
        actor=caller.identity,
        source="api",
        reason=payload.reason,
    )
    return combination_out(halted.combination)


@router.post(
    "/{int:combination_id}/unshadow",
    response={200: CombinationOut, **ERRORS},
    summary="Take a combination out of shadow, back to where it came from",
)
def unshadow(request: HttpRequest, combination_id: int, payload: ReasonIn) -> CombinationOut:
    """It returns to the state it was put in shadow from: ``new``, ``retired``, or a canary at
    the share it had (409 if the other canaries leave no room for it)."""
    caller = caller_of(request)
    combination = combinations.unshadow(
        tenant=caller.tenant,
        combination_id=combination_id,
        actor=caller.identity,
        source="api",
        reason=payload.reason,
    )
    return combination_out(combination)


@router.post(
    "/{int:combination_id}/resume",
    response={200: CombinationOut, **ERRORS},
    summary="Resume a halted combination: it returns to the state and share it halted from",
)
def resume(request: HttpRequest, combination_id: int, payload: ReasonIn) -> CombinationOut:
    """A halted canary is a canary at its former share again, a halted active combination
    is active again (the one active now is retired), one halted in shadow is in shadow again.
    Runs halted meanwhile stay halted; voided approvals stay void. 409 when it is not halted
    (two resumes at once resume once) or a canary's share no longer fits."""
    caller = caller_of(request)
    plan = combinations.resume(
        tenant=caller.tenant,
        combination_id=combination_id,
        actor=caller.identity,
        source="api",
        reason=payload.reason,
    )
    return combination_out(plan.combination)


@router.post(
    "/{int:combination_id}/retire",
    response={200: CombinationOut, **ERRORS},
    summary="Retire a new, shadow, canary or halted combination",
)
def retire(request: HttpRequest, combination_id: int, payload: ReasonIn) -> CombinationOut:
    """No new run goes to it. A halted one's runs in flight are halted with it. The active
    combination is retired by activating another or by a rollback (409 here), and so is a
    halted one the tenant's runs fail closed on."""
    caller = caller_of(request)
    plan = combinations.retire(
        tenant=caller.tenant,
        combination_id=combination_id,
        actor=caller.identity,
        source="api",
        reason=payload.reason,
    )
    return combination_out(plan.combination)


@router.post(
    "/{int:combination_id}/rollback",
    response={200: RollbackOut, **ERRORS},
    summary="Roll back a combination (or see what a rollback would do)",
)
def rollback(request: HttpRequest, combination_id: int, payload: RollbackIn) -> RollbackOut:
    """Halts the combination and its running runs, lists in-flight side effects, restores the
    previous (or the given) combination, queues look-ups of the unknown side effects a worker
    can settle, and reports what needs a human (escalated calls, calls nothing can look up,
    approvals still pending). ``dry_run`` changes nothing. Running it twice is harmless. 409
    for the only active combination with no ``restore_id``: create and activate another
    combination, or name one; 409 ``INVALID_TRANSITION`` for a new or a retired one."""
    caller = caller_of(request)
    report = combinations.rollback(
        tenant=caller.tenant,
        combination_id=combination_id,
        actor=caller.identity,
        source="api",
        reason=payload.reason,
        restore_id=payload.restore_id,
        dry_run=payload.dry_run,
    )
    return RollbackOut(**report.as_dict())


# --- metrics --------------------------------------------------------------------------------


class SummaryOut(Schema):
    keyed_requests: int
    dedup_hits: int
    dedup_hit_rate: float
    executions: int
    became_uncertain: int
    duplicate_side_effects: int
    uncertain_now: int
    decisions: dict[str, int]


class CombinationMetricsOut(Schema):
    combination_id: int | None
    label: str | None
    state: str | None
    metrics: SummaryOut


class ToolMetricsOut(Schema):
    tool: str
    metrics: SummaryOut


class PointOut(SummaryOut):
    bucket_start: datetime


class WindowQuery(Schema):
    window_minutes: int = Field(default=60, ge=1, le=60 * 24 * 90)
    combination_id: int | None = Field(default=None, ge=1, le=2**62)
    tool: str | None = Field(default=None, min_length=1, max_length=200)


def _window_of(request: HttpRequest, query: WindowQuery) -> tuple[Tenant, datetime]:
    """The caller's tenant and the start of the query's window; unknown parameters are refused."""
    reject_unknown_query(request, WindowQuery)
    return caller_of(request).tenant, metrics.window_start(query.window_minutes)


@metrics_router.get(
    "/combinations",
    response={200: list[CombinationMetricsOut], 400: Problem, 401: Problem},
    summary="Metrics per combination over a window",
)
def metrics_by_combination(
    request: HttpRequest, query: Query[WindowQuery]
) -> list[CombinationMetricsOut]:
    tenant, since = _window_of(request, query)
    summaries = metrics.by_combination(tenant, since=since)
    known = {c.pk: c for c in VersionCombination.objects.filter(tenant=tenant)}
    out = []
    for combination_id, summary in sorted(summaries.items(), key=lambda i: i[0] or 0):
        combination = known.get(combination_id) if combination_id else None
        out.append(
            CombinationMetricsOut(
                combination_id=combination_id,
                label=combination.label if combination else None,
                state=combination.state if combination else None,
                metrics=SummaryOut(**summary.as_dict()),
            )
        )
    return out


@metrics_router.get(
    "/tools",
    response={200: list[ToolMetricsOut], 400: Problem, 401: Problem},
    summary="Metrics per tool over a window",
)
def metrics_by_tool(request: HttpRequest, query: Query[WindowQuery]) -> list[ToolMetricsOut]:
    tenant, since = _window_of(request, query)
    rows = metrics.by_tool(tenant, since=since, combination_id=query.combination_id)
    return [
        ToolMetricsOut(tool=tool, metrics=SummaryOut(**s.as_dict()))
        for tool, s in sorted(rows.items())
    ]


@metrics_router.get(
    "/series",
    response={200: list[PointOut], 400: Problem, 401: Problem},
    summary="A time series in 5-minute buckets",
)
def metrics_series(request: HttpRequest, query: Query[WindowQuery]) -> list[PointOut]:
    tenant, since = _window_of(request, query)
    points = metrics.series(
        tenant, since=since, combination_id=query.combination_id, tool=query.tool
    )
    return [PointOut(**point) for point in points]


# --- thresholds -----------------------------------------------------------------------------


class ThresholdIn(Strict):
    metric: Literal["dedup_hit_rate", "uncertain_results", "duplicate_side_effects"]
    above: JsonNumber = Field(ge=0, le=1e9)
    window_minutes: JsonInt = Field(default=15, ge=1, le=thresholds.MAX_WINDOW_MINUTES)
    min_requests: JsonInt = Field(default=20, ge=0, le=10**9)
    action: Literal["alert", "halt"] = "alert"
    email: str = Field(default="", max_length=254, pattern=senders.EMAIL_PATTERN)
    webhook_url: str = Field(default="", max_length=200, pattern=senders.WEBHOOK_PATTERN)


class ThresholdOut(Schema):
    id: int
    metric: str
    above: float
    window_minutes: int
    min_requests: int
    action: str
    email: str
    webhook_url: str
    enabled: bool


def threshold_out(t: Threshold) -> ThresholdOut:
    return ThresholdOut(
        id=t.pk,
        metric=t.metric,
        above=t.above,
        window_minutes=t.window_minutes,
        min_requests=t.min_requests,
        action=t.action,
        email=t.email,
        webhook_url=t.webhook_url,
        enabled=t.enabled,
    )


@thresholds_router.post(
    "", response={201: ThresholdOut, 400: Problem, 401: Problem}, summary="Add a threshold"
)
def add_threshold(request: HttpRequest, payload: ThresholdIn) -> Status:
    """Crossing it raises an alert (email, webhook) or halts the combination (fail closed)."""
    caller = caller_of(request)
    threshold = thresholds.add_threshold(
        tenant=caller.tenant, actor=caller.identity, source="api", **payload.model_dump()
    )
    return Status(201, threshold_out(threshold))


@thresholds_router.get(
    "", response={200: list[ThresholdOut], 401: Problem}, summary="List thresholds"
)
def list_thresholds(request: HttpRequest) -> list[ThresholdOut]:
    rows = Threshold.objects.filter(tenant=caller_of(request).tenant).order_by("pk")
    return [threshold_out(t) for t in rows]
