"""Rollout plans: start one, follow its steps and their analyses, pause, resume, skip, abort."""

from __future__ import annotations

from typing import Any, Literal

from django.http import HttpRequest
from ninja import Router, Schema, Status
from pydantic import Field

from ledger.api.auth import TokenAuth, caller_of
from ledger.api.schemas import ApiDateTime, JsonInt, PositiveInt, Problem, Strict
from ledger.combinations import rollouts
from ledger.errors import NotFound
from ledger.models import RolloutPlan
from ledger.permissions import Scope

router = Router(tags=["rollouts"], auth=TokenAuth(Scope.LIFECYCLE))
ERRORS = {400: Problem, 401: Problem, 404: Problem, 409: Problem}


class StepIn(Strict):
    share_bp: JsonInt = Field(ge=0, le=10_000, description="Basis points of new runs; 0 is shadow.")
    min_minutes: JsonInt = Field(default=0, ge=0, le=rollouts.MAX_STEP_MINUTES)
    min_samples: JsonInt = Field(
        default=0,
        ge=0,
        le=rollouts.MAX_STEP_SAMPLES,
        description="Keyed requests of the candidate during the step.",
    )


class PlanIn(Strict):
    candidate_id: PositiveInt
    steps: list[StepIn] = Field(min_length=1, max_length=rollouts.MAX_STEPS)


class ActionIn(Strict):
    reason: str = Field(min_length=1, max_length=2000, pattern=rollouts.REASON_PATTERN)


class StepOut(Schema):
    position: int
    share_bp: int
    min_minutes: int
    min_samples: int
    state: str
    started_at: ApiDateTime | None
    ended_at: ApiDateTime | None
    analysis: dict[str, Any] = Field(
        description="The last evaluation: samples, the candidate's metrics during the step, "
        "each threshold's observed value and verdict, and the outcome."
    )


class PlanOut(Schema):
    id: int
    candidate_id: int
    candidate_label: str
    state: str
    current_step: int
    reason: str
    created_by: str
    created_at: ApiDateTime
    finished_at: ApiDateTime | None
    steps: list[StepOut]


def plan_out(plan: RolloutPlan) -> PlanOut:
    return PlanOut(
        id=plan.pk,
        candidate_id=plan.candidate_id,
        candidate_label=plan.candidate.label,
        state=plan.state,
        current_step=plan.current_step,
        reason=plan.reason,
        created_by=plan.created_by,
        created_at=plan.created_at,
        finished_at=plan.finished_at,
        steps=[
            StepOut(
                position=s.position,
                share_bp=s.share_bp,
                min_minutes=s.min_minutes,
                min_samples=s.min_samples,
                state=s.state,
                started_at=s.started_at,
                ended_at=s.ended_at,
                analysis=s.analysis,
            )
            for s in plan.steps.all()
        ],
    )


def _plans(request: HttpRequest) -> Any:
    tenant = caller_of(request).tenant
    return (
        RolloutPlan.objects.filter(tenant=tenant)
        .select_related("candidate")
        .prefetch_related("steps")
    )


@router.post("", response={201: PlanOut, **ERRORS}, summary="Start a rollout plan")
def create(request: HttpRequest, payload: PlanIn) -> Status:
    """A plan for a candidate combination, started at its first step. Shares rise from step
    to step and the last is 10000 (the candidate becomes active)."""
    caller = caller_of(request)
    plan = rollouts.create_plan(
        tenant=caller.tenant,
        candidate_id=payload.candidate_id,
        steps=[rollouts.StepSpec(s.share_bp, s.min_minutes, s.min_samples) for s in payload.steps],
        actor=caller.identity,
        source="api",
    )
    return Status(201, plan_out(_plans(request).get(pk=plan.pk)))


@router.get("", response={200: list[PlanOut], 401: Problem}, summary="List rollout plans")
def list_plans(request: HttpRequest) -> list[PlanOut]:
    return [plan_out(plan) for plan in _plans(request).order_by("-pk")[:100]]


@router.get(
    "/{int:plan_id}", response={200: PlanOut, 401: Problem, 404: Problem}, summary="Get a plan"
)
def get_plan(request: HttpRequest, plan_id: int) -> PlanOut:
    plan = _plans(request).filter(pk=plan_id).first()
    if plan is None:
        raise NotFound(f"no rollout plan {plan_id}")
    return plan_out(plan)


@router.post(
    "/{int:plan_id}/{action}",
    response={200: PlanOut, **ERRORS},
    summary="Pause, resume, skip the current step of, or abort a plan, with a reason",
)
def act(
    request: HttpRequest,
    plan_id: int,
    action: Literal["pause", "resume", "skip", "abort"],
    payload: ActionIn,
) -> PlanOut:
    caller = caller_of(request)
    rollouts.act_on_plan(
        tenant=caller.tenant,
        plan_id=plan_id,
        action=action,
        actor=caller.identity,
        source="api",
        reason=payload.reason,
    )
    return plan_out(_plans(request).get(pk=plan_id))
