"""A call after its decision: started once its approval is granted, kept alive by
heartbeats, and completed with its outcome (DESIGN sections 3 and 4)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import jsonschema
from django.db import transaction
from django.db.models.functions import Now

from ledger import records, shadow
from ledger.calls.observations import observation_for
from ledger.calls.same_input import refuse_other_input
from ledger.calls.selectors import entry_for, entry_with_locked_record
from ledger.calls.values import Caller, CallResult, Lease, entry_classification
from ledger.decisions import failure_is_final
from ledger.domain import Decision, EntryStatus, RecordState
from ledger.errors import ApprovalError, InvalidInput, InvalidTransition, StaleFencingToken
from ledger.models import AuditEvent, IdempotencyRecord, LedgerEntry, Tool
from ledger.records import Outcome
from ledger.services import approvals
from ledger.services.entries import transition_entry

#: The most of a schema's rule an output-schema failure quotes (a rule may be a whole subschema).
RULE_SHOWN = 200


class NotWaiting(ApprovalError):
    """The action is not waiting to be started: it is running or ended, or its outcome is
    unknown and nobody asked to run it again (it is being looked up). ``state`` is its
    record's."""

    def __init__(self, record: IdempotencyRecord) -> None:
        super().__init__(f"the action is {record.state}; it is not waiting for an approval")
        self.state = RecordState(record.state)


def start_approved(
    *, record: IdempotencyRecord, entry: LedgerEntry | None, actor: str, source: str
) -> LedgerEntry:
    """Start the action of a call whose approval was granted, in one transaction under the
    record's lock: the approval used up, the record started (lease, fencing token), the
    entry approved, then started. ``entry`` is the call's; None takes the record's latest,
    read under the lock (a compensation asked for again has a new one). Returns the entry,
    its ``record`` the started record.

    Raises ``NotWaiting``, ``ApprovalError`` (no granted approval yet) or ``ApprovalVoid``
    (granted for another action, or expired; voided, audited, before it is raised), each
    having changed nothing else. Runtimes (``start_call``) and the worker that runs
    compensations (``reconcile.compensation_runs``) start through it."""
    try:
        with transaction.atomic():
            # The record first, then its approval: the order every settling transition takes
            # (it locks the record, then voids open approvals), so the two cannot deadlock.
            locked, _now = records.lock_record(record.pk)
            if entry is None:
                entry = (
                    LedgerEntry.objects.select_related("tool", "combination", "run")
                    .filter(record=locked)
                    .latest("pk")
                )
            if not locked.waits_to_start:
                raise NotWaiting(locked)
            try:
                # The approval is used up where the record starts.
                started = records.start_execution(
                    record=locked, entry=entry, lease_owner=actor, actor=actor, source=source
                )
            except approvals.ApprovalVoid:
                raise
            except ApprovalError:
                if locked.state == RecordState.UNKNOWN and approvals.open_approval(locked) is None:
                    raise NotWaiting(locked) from None
                raise
            transition_entry(entry, EntryStatus.APPROVED)
            transition_entry(
                entry, EntryStatus.STARTED, started_at=Now(), fencing_token=started.fencing_token
            )
    except approvals.ApprovalVoid as void:
        approvals.invalidate(approval=void.approval, actor=actor, detail=str(void), source=source)
        raise
    entry.record = started
    return entry


def start_call(*, caller: Caller, call_id: str, tool_input: Any) -> CallResult:
    """Start a call whose approval was granted, to run ``tool_input`` (the recorded action's,
    or refused before anything is used); the approval is used up in the same step
    (``start_approved``)."""
    entry = entry_for(caller, call_id)
    shadow.refuse_follow_up(entry.run, entry.decision)
    record = entry.record
    if record is None or entry.decision != Decision.APPROVAL_REQUIRED:
        raise InvalidTransition("only a call that was waiting for approval can be started")
    refuse_other_input(
        caller=caller, entry=entry, record=record, tool_input=tool_input, step="start"
    )
    try:
        start_approved(
            record=record, entry=entry, actor=caller.identity, source=AuditEvent.Source.API
        )
    except approvals.ApprovalVoid as void:
        raise ApprovalError(str(void)) from None
    started = entry.record
    assert started is not None
    result = CallResult(entry, Decision.EXECUTE, entry_classification(entry))
    result.lease = Lease(started.fencing_token, started.lease_expires_at)  # type: ignore[arg-type]
    return result


def heartbeat_call(*, caller: Caller, call_id: str, fencing_token: int) -> datetime:
    """Extend the lease of a running call; its new expiry. Only under the call's own token: a
    call that lent its record to a replay cannot keep the replay's lease alive."""
    entry = entry_for(caller, call_id)
    if entry.record is None or entry.fencing_token is None:
        raise InvalidTransition("this call holds no lease")
    if entry.fencing_token != fencing_token:
        raise StaleFencingToken("this token is not this call's own")
    return records.heartbeat(record=entry.record, fencing_token=fencing_token)


def _validate_result(tool: Tool, result: Any) -> str | None:
    """Why ``result`` does not match the tool's output schema, or None when it does.

    An MCP tool's result is a ``CallToolResult``; its ``outputSchema`` describes the
    ``structuredContent`` inside it, which the specification requires of such a tool.
    """
    if not tool.output_schema:
        return None
    if tool.kind == Tool.Kind.MCP:
        if not isinstance(result, dict) or not isinstance(result.get("structuredContent"), dict):
            return f"{tool.name} declares an outputSchema but returned no structuredContent"
        result = result["structuredContent"]
    try:
        jsonschema.validate(result, tool.output_schema)
    except jsonschema.ValidationError as exc:
        # Where, and the schema's rule, never the value (jsonschema's message quotes it): the
        # note is stored as the error's message, and the value may be a secret out of its field.
        rule = json.dumps(exc.validator_value, default=str)
        rule = rule if len(rule) <= RULE_SHOWN else rule[:RULE_SHOWN] + "…"
        return (
            f"the result does not match {tool.name}'s output schema: "
            f"{exc.json_path} fails {exc.validator!r}: {rule}"
        )
    except jsonschema.SchemaError:
        return f"{tool.name}'s output schema is invalid; the result cannot be trusted"
    return None


@dataclass(frozen=True, slots=True)
class Report:
    """A holder's report, as the ledger records it; ``problem`` says why a success reported
    is not one."""

    outcome: Outcome
    result: Any
    error: dict[str, Any] | None
    retryable: bool
    problem: str | None = None


def checked_report(
    tool: Tool,
    *,
    outcome: Outcome,
    result: Any = None,
    error: dict[str, Any] | None = None,
    retryable: bool = False,
) -> Report:
    """What the report of a call of ``tool`` records, whoever reports it (a runtime,
    ``complete_call``; the worker that ran a compensation). A result that fails the tool's
    output schema is not a success: the side effect may have happened, so the outcome is
    uncertain (``MALFORMED_RESULT``). A failure needs an error with a code, and is retryable
    as its reporter said unless the code is final whatever it said
    (``decisions.failure_is_final``)."""
    problem = None
    if outcome is Outcome.SUCCEEDED:
        problem = _validate_result(tool, result)
        if problem is not None:
            outcome = Outcome.UNCERTAIN
            error = {"code": "MALFORMED_RESULT", "message": problem}
    if outcome is Outcome.FAILED and error is None:
        raise InvalidInput("a failed call needs an error with a code")
    retryable = not failure_is_final(error_code=(error or {}).get("code"), retryable=retryable)
    return Report(outcome, result, error, retryable, problem)


def complete_call(
    *,
    caller: Caller,
    call_id: str,
    fencing_token: int,
    outcome: Outcome,
    result: Any = None,
    error: dict[str, Any] | None = None,
    retryable: bool = False,
    evidence: Any = None,
) -> CallResult:
    """Record how a call ended, as ``checked_report`` says: a result that fails the tool's
    output schema is not a success; the side effect may have happened, so the call becomes
    uncertain.
    """
    notes: list[str] = []
    try:
        # The record is locked by the same query that reads the entry (one round trip); the
        # report is validated and applied under that lock, in one transaction.
        with transaction.atomic():
            entry, now = entry_with_locked_record(caller, call_id)
            record = entry.record
            assert record is not None
            if record.state != RecordState.EXECUTING:
                # Whoever moved the record on (a lapse, a settlement) may have moved this entry
                # too, after the snapshot its row was read in: read its status again, now that
                # the record's lock keeps it still.
                entry.status = LedgerEntry.objects.values_list("status", flat=True).get(pk=entry.pk)
            if entry.fencing_token is None:
                raise InvalidTransition("this call was never started, so it cannot be completed")
            if entry.fencing_token != fencing_token:
                raise records.CompletionRefused(
                    record,
                    reason=records.REFUSED_OTHER_CALL,
                    fencing_token=fencing_token,
                    outcome=outcome,
                    actor=caller.identity,
                    source=AuditEvent.Source.API,
                )
            report = checked_report(
                entry.tool, outcome=outcome, result=result, error=error, retryable=retryable
            )
            if report.problem is not None:
                notes.append(report.problem)
            updated = records.complete_locked(
                record,
                now=now,
                fencing_token=fencing_token,
                outcome=report.outcome,
                actor=caller.identity,
                result=report.result,
                error=report.error,
                retryable=report.retryable,
                entry=entry,
                evidence=evidence,
            )
    except records.CompletionRefused as refused:
        # Audited after the rollback, so the refusal's event survives the error it raises. The
        # refusal says what the record holds now and what the model should be told: a late or
        # refused report is an answer for the runtime to pass on, never a failure to raise.
        refusal = records.refuse_completion(refused)
        entry.record = refused.record
        refusal.extra = {
            "record_state": refused.record.state,
            "observation": observation_for(entry, None),
        }
        raise refusal from None
    entry.record = updated
    if updated.state == RecordState.UNKNOWN and updated.escalated:
        notes.append(updated.escalation_reason)
    observation = observation_for(entry, None)
    return CallResult(
        entry, Decision.EXECUTE, entry_classification(entry), observation, notes=notes
    )
