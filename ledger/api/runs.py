"""Run endpoints: start under a version combination, finish with a termination reason."""

from __future__ import annotations

from django.http import HttpRequest
from ninja import Router, Status

from ledger.api.auth import TokenAuth, caller_of
from ledger.api.schemas import MirrorOut, Problem, RunFinishIn, RunIn, RunOut
from ledger.errors import InvalidInput, NotFound
from ledger.models import Run
from ledger.permissions import Scope
from ledger.services.runs import finish_run, mirror_of, shadow_run_id, start_run

router = Router(tags=["runs"], auth=TokenAuth(Scope.RUNS))


def run_out(run: Run) -> RunOut:
    combination = run.combination
    mirrored_into = mirror_of(run)
    return RunOut(
        run_id=run.run_id,
        user_id=run.user_id,
        agent_id=run.agent_id,
        status=run.status,
        combination_id=combination.pk if combination else None,
        combination_label=combination.label if combination else None,
        shadow_of=run.shadow_of.run_id if run.shadow_of_id and run.shadow_of else None,
        mirror=MirrorOut(run_id=shadow_run_id(run.run_id), combination_id=mirrored_into.pk)
        if mirrored_into is not None
        else None,
        termination_reason=run.termination_reason,
        started_at=run.started_at,
        finished_at=run.finished_at,
    )


def _run(request: HttpRequest, run_id: str) -> Run:
    caller = caller_of(request)
    run = (
        Run.objects.select_related("combination", "shadow_of")
        .filter(tenant=caller.tenant, run_id=run_id)
        .first()
    )
    if run is None:
        raise NotFound(f"no run {run_id!r}")
    return run


@router.post(
    "",
    response={200: RunOut, 201: RunOut, 400: Problem, 401: Problem, 404: Problem, 409: Problem},
    summary="Start a run",
)
def create_run(request: HttpRequest, payload: RunIn) -> Status:
    """Start a run under the given version combination, or the tenant's active one (or a
    canary). Starting the same run id again returns the same run. A halted combination
    answers 409 ``RUN_HALTED``. With ``shadow`` and ``mirrors_run_id`` the run is a shadow
    run of the tenant's combination in shadow (or the given one): its reads run, its
    side-effecting calls are answered ``SHADOW_DRY_RUN`` and never execute."""
    caller = caller_of(request)
    if payload.shadow != (payload.mirrors_run_id is not None):
        raise InvalidInput("a shadow run needs both shadow: true and the mirrors_run_id")
    run, created = start_run(
        tenant=caller.tenant,
        user_id=payload.user_id,
        actor=caller.identity,
        run_id=payload.run_id,
        agent_id=payload.agent_id or caller.agent_id,
        combination_id=payload.combination_id,
        shadow_of=payload.mirrors_run_id,
    )
    return Status(201 if created else 200, run_out(run))


@router.get("/{run_id}", response={200: RunOut, 401: Problem, 404: Problem}, summary="Get a run")
def get_run(request: HttpRequest, run_id: str) -> RunOut:
    return run_out(_run(request, run_id))


@router.post(
    "/{run_id}/finish",
    response={200: RunOut, 400: Problem, 401: Problem, 404: Problem, 409: Problem},
    summary="Finish a run",
)
def finish(request: HttpRequest, run_id: str, payload: RunFinishIn) -> RunOut:
    run = finish_run(
        run=_run(request, run_id),
        termination_reason=payload.termination_reason,
        actor=caller_of(request).identity,
    )
    return run_out(run)
