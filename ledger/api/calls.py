"""The call protocol: the hot path and its follow-ups, and record look-up by key."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from functools import partial
from typing import Any

from django.db import DatabaseError
from django.http import HttpRequest, HttpResponse
from ninja import Query, Router, Schema
from pydantic import Field

from ledger import calls, tracing
from ledger.api import refusal
from ledger.api.auth import TokenAuth, caller_of
from ledger.api.parser import reject_unknown_query
from ledger.api.schemas import (
    CallBatchIn,
    CallBatchOut,
    CallIn,
    CallOut,
    ClassificationOut,
    CompleteIn,
    HeartbeatIn,
    HeartbeatOut,
    LeaseOut,
    Problem,
    RecordOut,
    ReplayIn,
    StartIn,
)
from ledger.calls import batch
from ledger.calls.values import entry_classification
from ledger.domain import Decision
from ledger.errors import NotFound
from ledger.middleware import store_refusal
from ledger.models import ApprovalRequest, IdempotencyRecord, LedgerEntry
from ledger.permissions import Scope
from ledger.problems import RETRY_AFTER_SECONDS
from ledger.records import Outcome, lease_seconds_granted
from ledger.services.compensations import compensation_view

router = Router(tags=["calls"], auth=TokenAuth(Scope.CALLS))
records_router = Router(tags=["records"], auth=TokenAuth(Scope.CALLS))
COMMON = {400: Problem, 401: Problem, 404: Problem, 503: Problem}


def call_out(
    entry: LedgerEntry,
    *,
    observation: dict | None,
    lease: calls.Lease | None = None,
    approval: ApprovalRequest | None = None,
    notes: list[str] | None = None,
) -> CallOut:
    record = entry.record
    return CallOut(
        call_id=str(entry.call_id),
        run_id=entry.run.run_id,
        step_id=entry.step_id,
        tool=entry.tool.name,
        status=entry.status,
        decision=Decision(entry.decision),
        idempotency_key=entry.idempotency_key,
        classification=ClassificationOut.of(entry_classification(entry)),
        observation=observation,
        lease=LeaseOut(
            fencing_token=lease.fencing_token,
            expires_at=lease.expires_at,
            seconds=lease_seconds_granted(),
        )
        if lease
        else None,
        approval_id=approval.pk if approval else None,
        approval_state=approval.state if approval else None,
        record_state=record.state if record else None,
        notes=notes or [],
    )


def _answer(result: calls.CallResult) -> CallOut:
    """The answer to one call, as a validated ``CallOut``."""
    body = call_out(
        result.entry,
        observation=result.observation,
        lease=result.lease,
        approval=result.approval,
        notes=result.notes,
    )
    body.decision = result.decision
    return body


def _respond(result: calls.CallResult) -> HttpResponse:
    """The answer serialised by pydantic itself (compiled), rather than dumped to Python values
    by django-ninja and encoded by the standard library's ``json``: on the hot path that costs
    about 5% of a request's CPU. The routes still declare ``CallOut`` (the OpenAPI document);
    ``schemas.ApiDateTime`` keeps times in the format the rest of the API writes."""
    response = HttpResponse(
        _answer(result).model_dump_json(),
        status=result.http_status,
        content_type="application/json; charset=utf-8",
    )
    if result.http_status == 409:
        # A ``wait`` tells the runtime when to ask again.
        response["Retry-After"] = str(calls.RETRY_AFTER_SECONDS)
    return response


def _in_span(
    request: HttpRequest, step: str, decide: Callable[[], calls.CallResult]
) -> calls.CallResult:
    """One step of the protocol, decided inside its trace span."""
    with tracing.decision_span(request.headers, step) as span:
        result = decide()
        tracing.describe_decision(span, result)
    return result


def _decided(
    request: HttpRequest, step: str, decide: Callable[[], calls.CallResult]
) -> HttpResponse:
    """The answer to one step of the protocol, decided inside its trace span."""
    return _respond(_in_span(request, step, decide))


@router.post(
    "",
    response={200: CallOut, 409: CallOut, 422: CallOut | Problem, **COMMON},
    summary="Record a tool call before it runs and get a decision",
)
def record_call(request: HttpRequest, payload: CallIn) -> HttpResponse:
    """The hot path. One request records the ledger entry, classifies the call, builds the
    idempotency key from the business intent, fingerprints the input, reserves the key and
    returns the decision: ``execute`` (with a lease and fencing token), ``recorded_result``,
    ``wait`` (409, Retry-After), ``approval_required``, ``forbidden`` or ``conflict`` (422),
    with the observation to hand to the model.
    """
    caller = caller_of(request)
    call = _call_input(payload)
    return _decided(request, "record", lambda: calls.record_call(caller=caller, request=call))


@router.post(
    "/batch",
    response={200: CallBatchOut, **COMMON},
    summary="Record several tool calls at once and get a decision for each",
)
def record_calls(request: HttpRequest, payload: CallBatchIn) -> HttpResponse:
    """The tool calls a model asked for in one turn, in one request: each is recorded and
    decided exactly as it would be alone, in the order given (so a second call of the same
    action in the batch is answered as its retry), and each answer carries the HTTP status the
    call would have had alone. A call that is refused (an unknown run, the caller's deadline
    passed, ...) has its problem document in its place; the others are still decided. The new
    keys of consecutive calls are reserved in one statement. When the database is in trouble,
    the call that meets it and every call after it are answered with the 503 they would have
    had alone, and nothing is tried for them; the calls before it keep their answers, and so
    does a call reserved in one statement with them (its lease is the runtime's). A body that
    does not validate changes nothing (400)."""
    caller = caller_of(request)
    results: list[dict[str, Any]] = []
    decided = batch.record_calls(
        caller=caller,
        requests=[_call_input(call) for call in payload.calls],
        decide=partial(_in_span, request, "record"),
    )
    trouble: tuple[dict[str, Any], int] | None = None
    for outcome in decided:
        if isinstance(outcome, calls.CallResult):
            results.append(_answered_in_batch(outcome))
        elif isinstance(outcome, DatabaseError):
            trouble = trouble or store_refusal(request, outcome)
            if trouble is None:  # not store trouble: a fault, logged as one
                raise outcome
            results.append(_refused_in_batch(request, *trouble))
        else:
            body = refusal(outcome)
            retry_after = RETRY_AFTER_SECONDS if body["status"] == 503 else None
            results.append(_refused_in_batch(request, body, retry_after))
    return HttpResponse(
        json.dumps({"results": results}), content_type="application/json; charset=utf-8"
    )


def _answered_in_batch(result: calls.CallResult) -> dict[str, Any]:
    return {
        "status": result.http_status,
        "call": _answer(result).model_dump(mode="json"),
        "problem": None,
        "retry_after": calls.RETRY_AFTER_SECONDS if result.http_status == 409 else None,
    }


def _refused_in_batch(
    request: HttpRequest, problem: dict[str, Any], retry_after: int | None
) -> dict[str, Any]:
    """A call of a batch answered with ``problem``, the document it would have had alone; its
    status is kept on the request for the security log (``console.api_denials``)."""
    refused_in_batch(request).append(problem["status"])
    return {
        "status": problem["status"],
        "call": None,
        "problem": problem,
        "retry_after": retry_after,
    }


def refused_in_batch(request: HttpRequest) -> list[int]:
    """The statuses of the calls of this request's batch that were refused, in order."""
    refused: list[int] = request.__dict__.setdefault("ledger_refused_in_batch", [])
    return refused


def _call_input(payload: CallIn) -> calls.CallInput:
    plan = payload.write_plan
    return calls.CallInput(
        run_id=payload.run_id,
        step_id=payload.step_id,
        tool=payload.tool,
        input=payload.input,
        business_object_id=payload.business_object_id,
        input_source=payload.input_source,
        data_classification=payload.data_classification,
        end_user_id=payload.end_user_id,
        write_plan=calls.WritePlanInput(**plan.model_dump()) if plan else None,
    )


@router.get("/{call_id}", response={200: CallOut, **COMMON}, summary="Get a call")
def get_call(request: HttpRequest, call_id: str) -> CallOut:
    entry, approval = calls.call_status(caller=caller_of(request), call_id=_uuid(call_id))
    return call_out(entry, observation=calls.observation_for(entry, approval), approval=approval)


@router.post(
    "/{call_id}/start",
    response={200: CallOut, 409: Problem, 422: Problem, **COMMON},
    summary="Start a call after its approval",
)
def start(request: HttpRequest, call_id: str, payload: StartIn) -> HttpResponse:
    """Uses the granted approval once; the approval must be for this exact action, and
    ``input`` the action's own (else 422 ``IDEMPOTENCY_KEY_CONFLICT``, nothing used)."""
    return _decided(
        request,
        "start",
        lambda: calls.start_call(
            caller=caller_of(request), call_id=_uuid(call_id), tool_input=payload.input
        ),
    )


@router.post(
    "/{call_id}/heartbeat",
    response={200: HeartbeatOut, 409: Problem, **COMMON},
    summary="Extend the lease of an executing call",
)
def heartbeat(request: HttpRequest, call_id: str, payload: HeartbeatIn) -> HeartbeatOut:
    until = calls.heartbeat_call(
        caller=caller_of(request), call_id=_uuid(call_id), fencing_token=payload.fencing_token
    )
    return HeartbeatOut(lease_expires_at=until, lease_seconds=lease_seconds_granted())


@router.post(
    "/{call_id}/complete",
    response={200: CallOut, 409: Problem, **COMMON},
    summary="Report how a call ended",
)
def complete(request: HttpRequest, call_id: str, payload: CompleteIn) -> HttpResponse:
    """``succeeded`` with the result (checked against the tool's output schema), ``failed``
    with an error (``retryable`` when no side effect happened), or ``uncertain`` after a timeout
    or lost connection. A stale fencing token is refused with 409."""
    return _decided(
        request,
        "complete",
        lambda: calls.complete_call(
            caller=caller_of(request),
            call_id=_uuid(call_id),
            fencing_token=payload.fencing_token,
            outcome=Outcome(payload.outcome),
            result=payload.result,
            error=payload.error.model_dump() if payload.error else None,
            retryable=payload.retryable,
            evidence=payload.evidence,
        ),
    )


@router.post(
    "/{call_id}/replay",
    response={200: CallOut, 409: CallOut, 422: Problem, **COMMON},
    summary="Ask whether and how an uncertain or failed call may be recovered",
)
def replay(request: HttpRequest, call_id: str, payload: ReplayIn) -> HttpResponse:
    """Applies the recovery table: idempotent tools replay (a new lease), conditional ones are
    checked (``current_hash``) and approved by a human, non-idempotent ones are looked up
    downstream, final failures are never replayed. ``input`` is what the replay would run:
    the recorded action's own, else 422 ``IDEMPOTENCY_KEY_CONFLICT`` and nothing is written."""
    return _decided(
        request,
        "replay",
        lambda: calls.replay_call(
            caller=caller_of(request),
            call_id=_uuid(call_id),
            tool_input=payload.input,
            current_hash=payload.current_hash,
        ),
    )


class KeyQuery(Schema):
    key: str = Field(min_length=1, max_length=1024)


@records_router.get(
    "", response={200: RecordOut, **COMMON}, summary="Look up an idempotency record by key"
)
def record_by_key(request: HttpRequest, query: Query[KeyQuery]) -> RecordOut:
    reject_unknown_query(request, KeyQuery)
    record = calls.record_by_key(caller=caller_of(request), key=query.key)
    return record_out(record)


def record_out(record: IdempotencyRecord) -> RecordOut:
    return RecordOut(
        key=record.key,
        tool=record.tool.name,
        state=record.state,
        executions=record.executions,
        duplicate_hits=record.duplicate_hits,
        result=record.result,
        error=record.error,
        created_at=record.created_at,
        updated_at=record.updated_at,
        compensation=compensation_view(record),
    )


def _uuid(value: str) -> str:
    try:
        return str(uuid.UUID(value))
    except ValueError:
        raise NotFound(f"no call {value!r}") from None
