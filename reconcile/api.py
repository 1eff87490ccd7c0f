"""Compensation endpoints of the JSON API (docs/compensation.md), mounted with the others by
``console.api``: declare, preview, request, and the same for a run as a whole. Deciding is for
a human approver on the console; the API never decides."""

from __future__ import annotations

from django.http import HttpRequest
from ninja import Query, Router, Status

from ledger.api.auth import TokenAuth, caller_of
from ledger.api.calls import KeyQuery, _uuid
from ledger.api.parser import reject_unknown_query
from ledger.api.schemas import (
    CompensationCallOut,
    CompensationDeclarationIn,
    CompensationDeclarationOut,
    CompensationKeyIn,
    CompensationOut,
    Problem,
    SagaOut,
    SagaStepOut,
)
from ledger.compensation import compensation_state
from ledger.errors import NotFound
from ledger.models import AuditEvent, Compensation, IdempotencyRecord, LedgerEntry, Run, Tool
from ledger.permissions import Scope
from ledger.services.compensations import compensation_record
from reconcile import compensation_requests, compensations

router = Router(tags=["compensations"], auth=TokenAuth(Scope.COMPENSATIONS))
ERRORS = {400: Problem, 401: Problem, 404: Problem, 409: Problem}


def _record(request: HttpRequest, key: str) -> IdempotencyRecord:
    tenant = caller_of(request).tenant
    record = IdempotencyRecord.objects.select_related("tool").filter(tenant=tenant, key=key)
    found = record.first()
    if found is None:
        raise NotFound("no record for that idempotency key")
    return found


def _run(request: HttpRequest, run_id: str) -> Run:
    run = Run.objects.filter(tenant=caller_of(request).tenant, run_id=run_id).first()
    if run is None:
        raise NotFound(f"no run {run_id!r}")
    return run


def _call_out(call: compensations.Preview) -> CompensationCallOut:
    return CompensationCallOut(**call.as_dict())


def _compensation_out(compensation: Compensation) -> CompensationOut:
    record = compensation_record(compensation)
    approval = compensations.pending_approval(compensation)
    return CompensationOut(
        call=_call_out(compensations.preview(record=compensation.original)),
        state=compensation_state(record.state if record is not None else None),
        requested_by=compensation.requested_by,
        approval_id=approval.pk if approval else None,
        approval_state=approval.state if approval else None,
    )


@router.post(
    "/declarations",
    response={200: CompensationDeclarationOut, **ERRORS},
    summary="Declare a tool's (or one call's) compensation",
    auth=TokenAuth(Scope.TOOLS),  # a runtime declares its tools' compensations as it registers them
)
def declare(request: HttpRequest, payload: CompensationDeclarationIn) -> CompensationDeclarationOut:
    """With ``call_id``, for that call only, before it completes (the runtime registers it
    between ``POST /calls`` and running the tool); it wins over the tool's declaration."""
    caller = caller_of(request)
    tool = Tool.objects.filter(tenant=caller.tenant, name=payload.tool).first()
    if tool is None:
        raise NotFound(f"no tool {payload.tool!r}")
    record = None
    if payload.call_id is not None:
        entry = (
            LedgerEntry.objects.select_related("record")
            .filter(tenant=caller.tenant, call_id=_uuid(payload.call_id), tool=tool)
            .first()
        )
        if entry is None or entry.record is None:
            raise NotFound(f"no call {payload.call_id} of {tool.name} with a record")
        record = entry.record
    declared = compensations.declare_compensation(
        tool=tool,
        compensating_tool=payload.compensating_tool,
        arguments=payload.arguments,
        actor=caller.identity,
        source=AuditEvent.Source.API,
        record=record,
    )
    return CompensationDeclarationOut(
        tool=tool.name,
        compensating_tool=payload.compensating_tool,
        arguments=declared.arguments,
        call_id=payload.call_id,
        declared_by=declared.declared_by,
    )


@router.get(
    "/preview",
    response={200: CompensationCallOut, **ERRORS},
    summary="Preview the compensation of an action",
)
def preview(request: HttpRequest, query: Query[KeyQuery]) -> CompensationCallOut:
    """The exact call the compensation would make; nothing is written."""
    reject_unknown_query(request, KeyQuery)
    return _call_out(compensations.preview(record=_record(request, query.key)))


@router.post(
    "",
    response={200: CompensationOut, 201: CompensationOut, **ERRORS},
    summary="Request the compensation of an action",
)
def request_compensation(request: HttpRequest, payload: CompensationKeyIn) -> Status:
    """201 with a new compensation waiting for an approver; 200 with the one that exists (a
    repeated request looks an unknown outcome up and never runs it twice)."""
    caller = caller_of(request)
    record = _record(request, payload.key)
    existed = Compensation.objects.filter(original=record).exists()
    compensation = compensation_requests.request_compensation(
        record=record,
        actor=caller.identity,
        requester_id=caller.user_id,
        source=AuditEvent.Source.API,
    )
    return Status(200 if existed else 201, _compensation_out(compensation))


@router.get("", response={200: CompensationOut, **ERRORS}, summary="Get an action's compensation")
def get_compensation(request: HttpRequest, query: Query[KeyQuery]) -> CompensationOut:
    reject_unknown_query(request, KeyQuery)
    compensation = Compensation.objects.filter(original=_record(request, query.key)).first()
    if compensation is None:
        raise NotFound("no compensation was requested for that action")
    return _compensation_out(compensation)


def _saga_out(run: Run) -> SagaOut:
    steps = []
    for step in compensations.saga_plan(run):
        call = step.call
        steps.append(
            SagaStepOut(
                original_key=step.original.key,
                state=step.state,
                call=_call_out(call) if call else None,
                problem=step.problem,
            )
        )
    return SagaOut(run_id=run.run_id, steps=steps)


@router.get(
    "/runs/{run_id}",
    response={200: SagaOut, **ERRORS},
    summary="Preview a run's compensation as a whole",
)
def preview_saga(request: HttpRequest, run_id: str) -> SagaOut:
    return _saga_out(_run(request, run_id))


@router.post(
    "/runs/{run_id}",
    response={200: SagaOut, **ERRORS},
    summary="Request a run's compensation as a whole",
)
def request_saga(request: HttpRequest, run_id: str) -> SagaOut:
    """Every succeeded non-idempotent action of the run that has a compensation, newest first;
    an approver decides them on the console, then a worker runs them in that order."""
    caller = caller_of(request)
    run = _run(request, run_id)
    compensation_requests.request_saga(
        run=run, actor=caller.identity, requester_id=caller.user_id, source=AuditEvent.Source.API
    )
    return _saga_out(run)
