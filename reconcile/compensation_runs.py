"""The worker's side of compensations (docs/compensation.md): run one approved compensation
once through its compensation adapter, or a run's compensations newest first (a saga),
stopping at the first that does not succeed."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from django.utils.translation import gettext_noop

from ledger import outbound, records
from ledger.calls.lifecycle import NotWaiting, checked_report, start_approved
from ledger.compensation import COMPENSATED, CompensationError, refuse_redacted
from ledger.domain import RecordState
from ledger.errors import ApprovalError, InvalidTransition
from ledger.models import AuditEvent, Compensation, Run
from ledger.records import Outcome
from ledger.services import approvals
from ledger.services.audit import audit
from ledger.services.compensations import compensation_record
from ledger.stored_text import StoredText
from reconcile.compensations import saga_compensations
from reconcile.models import CompensationAdapter

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Sent:
    outcome: Outcome
    result: Any = None
    error: dict[str, Any] | None = None
    retryable: bool = False


_SAGA_STOPPED = StoredText(gettext_noop("%(key)s is %(state)s; %(left)s not run"))


def _send(adapter: CompensationAdapter, compensation: Compensation) -> Sent:
    """POST the compensating call with its key; what came of it. Arguments holding a redacted
    value are never sent (``compensation.refuse_redacted``): a final failure, since sending
    them again would not help."""
    try:
        refuse_redacted(compensation.arguments)
    except CompensationError as exc:
        return Sent(Outcome.FAILED, error={"code": "REDACTED_ARGUMENT", "message": str(exc)})
    try:
        response = outbound.post_json(
            compensation.url,
            compensation.arguments,
            timeout=adapter.timeout_seconds,
            headers={"Idempotency-Key": compensation.key},
        )
    except Exception as exc:  # any failure: whether it went out is what counts
        failure = outbound.failure_of(exc)
        if failure is outbound.Failure.REFUSED:
            return _not_sent("OUTBOUND_REFUSED", str(exc))
        if failure is outbound.Failure.NOT_SENT:
            return _not_sent("NOT_SENT", f"{type(exc).__name__}: {exc}")
        # It may have arrived and been acted on: looked up by its key, never sent again.
        message = f"{type(exc).__name__} ({failure}): {exc}"
        return Sent(Outcome.UNCERTAIN, error={"code": "NO_RESPONSE", "message": message[:500]})
    status = response.status_code
    if status in (adapter.success_statuses or [200, 201]):
        try:
            body = response.json()
        except ValueError:
            body = None
        return Sent(Outcome.SUCCEEDED, body if isinstance(body, dict) else {"status": status})
    error = {"code": f"HTTP_{status}", "message": response.text[:500]}
    if status >= 500:  # the downstream may have done it before failing: look it up
        return Sent(Outcome.UNCERTAIN, error=error)
    return Sent(Outcome.FAILED, error=error)


def _not_sent(code: str, message: str) -> Sent:
    """Known not to have reached the downstream: failed, and safe to run again."""
    return Sent(Outcome.FAILED, error={"code": code, "message": message[:500]}, retryable=True)


def run_compensation(compensation_id: int, *, worker: str) -> str:
    """Run one approved compensation, once: start its record with the granted approval (used
    up in the same transaction), POST, record the outcome. Anything else (not approved yet,
    already running or done, unknown and being looked up) is left as it is. Safe to repeat."""
    compensation = Compensation.objects.select_related("tool").filter(pk=compensation_id).first()
    record = compensation_record(compensation) if compensation is not None else None
    if compensation is None or record is None:
        return "missing"
    actor = f"worker:{worker}"
    try:
        entry = start_approved(
            record=record, entry=None, actor=actor, source=AuditEvent.Source.WORKER
        )
    except NotWaiting as refused:
        return refused.state.value  # running, done, or unknown and being looked up
    except approvals.ApprovalVoid:
        return "approval-void"
    except ApprovalError:
        return "not-approved"
    except InvalidTransition:
        return "refused"
    started = entry.record
    assert started is not None
    adapter = CompensationAdapter.objects.filter(tool=compensation.tool).first()
    sent = (
        _send(adapter, compensation)
        if adapter is not None
        else _not_sent("NO_ADAPTER", f"{compensation.tool.name} has no compensation adapter")
    )
    report = checked_report(
        compensation.tool,
        outcome=sent.outcome,
        result=sent.result,
        error=sent.error,
        retryable=sent.retryable,
    )
    records.complete_execution(
        record=started,
        fencing_token=started.fencing_token,
        outcome=report.outcome,
        actor=actor,
        source=AuditEvent.Source.WORKER,
        result=report.result,
        error=report.error,
        retryable=report.retryable,
        entry=entry,
    )
    logger.info("compensation", extra={"compensation": compensation.pk, "outcome": report.outcome})
    return report.outcome.value


def run_saga(run_pk: int, *, worker: str) -> dict[str, Any]:
    """Run the run's approved compensations one at a time, newest first, and stop at the first
    that does not succeed; what was done and what is left. Steps already compensated are
    passed over, so running it again continues where it stopped."""
    run = Run.objects.get(pk=run_pk)
    steps = saga_compensations(run)
    done: list[str] = []
    for position, compensation in enumerate(steps):
        record = compensation_record(compensation)
        if record is not None and record.state != RecordState.SUCCEEDED:
            run_compensation(compensation.pk, worker=worker)
            record = compensation_record(compensation)
        state = record.state if record is not None else "missing"
        if state != RecordState.SUCCEEDED:
            left = [c.key for c in steps[position + 1 :]]
            _audit_saga(
                run,
                worker,
                "compensation.saga_stopped",
                after={"stopped_at": compensation.key, "state": state, "not_run": left},
                detail=_SAGA_STOPPED(key=compensation.key, state=state, left=len(left)),
            )
            return {"done": done, "stopped_at": compensation.key, "state": state, "not_run": left}
        done.append(compensation.key)
    _audit_saga(run, worker, "compensation.saga_done", after={"done": done})
    return {"done": done, "stopped_at": None, "state": COMPENSATED, "not_run": []}


def _audit_saga(
    run: Run, worker: str, action: str, *, after: dict[str, Any], detail: str = ""
) -> None:
    audit(
        tenant=run.tenant_id,
        actor=f"worker:{worker}",
        action=action,
        target=run,
        source=AuditEvent.Source.WORKER,
        after=after,
        detail=detail,
    )
