"""The ledger entry of each call: a new call's, written before the tool runs, and a retry's,
which shares the action of the call it retries."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.db.models.functions import Now

from ledger.calls.values import Caller, CallInput, Lease
from ledger.classification import Classification
from ledger.domain import Decision, EntryStatus, RecordState
from ledger.models import IdempotencyRecord, LedgerEntry, Run, Tool
from ledger.redaction import redact_for_storage
from ledger.services.statements import DbTime, insert_returning_id

_ENTRY_STATUS_FOR = {
    Decision.EXECUTE: EntryStatus.STARTED,
    Decision.WAIT: EntryStatus.PLANNED,
    Decision.APPROVAL_REQUIRED: EntryStatus.PLANNED,
    Decision.FORBIDDEN: EntryStatus.PLANNED,
    Decision.CONFLICT: EntryStatus.PLANNED,
    Decision.SHADOW_DRY_RUN: EntryStatus.PLANNED,
}


@dataclass(frozen=True, slots=True)
class NewCall:
    """What every entry of one recorded call shares, whatever its decision."""

    caller: Caller
    run: Run
    tool: Tool
    request: CallInput
    input_hash: str
    classification: Classification
    key: str


def build(
    call: NewCall,
    *,
    decision: Decision,
    record: IdempotencyRecord | None,
    code: str = "",
    reused_record: bool = False,
) -> LedgerEntry:
    """The entry of a new call (not saved), in the status its decision gives it."""
    caller, request, classification = call.caller, call.request, call.classification
    now: Any = DbTime()  # the database's clock, written by the INSERT
    if decision is Decision.RECORDED_RESULT:
        assert record is not None
        status = (
            EntryStatus.SUCCEEDED if record.state == RecordState.SUCCEEDED else EntryStatus.FAILED
        )
    else:
        status = _ENTRY_STATUS_FOR[decision]
    return LedgerEntry(
        tenant=caller.tenant,
        step_id=request.step_id,
        run=call.run,
        tool=call.tool,
        input_hash=call.input_hash,
        input=redact_for_storage(request.input, request.data_classification),
        status=status,
        idempotency=classification.idempotency,
        replay_policy=classification.replay_policy,
        destructive=classification.destructive,
        classification_reason=classification.reason,
        classification_rule=classification.rule,
        idempotency_key=call.key,
        record=record,
        decision=decision,
        observation_code=code,
        input_source=request.input_source,
        caller_token=caller.token,
        agent_id=caller.agent_id,
        end_user_id=request.end_user_id,
        data_classification=request.data_classification,
        combination=call.run.combination,
        fencing_token=record.fencing_token if decision is Decision.EXECUTE and record else None,
        started_at=now if decision is Decision.EXECUTE else None,
        finished_at=now if decision is Decision.RECORDED_RESULT else None,
        reused_record=reused_record,
    )


def add(call: NewCall, **decided: Any) -> LedgerEntry:
    """``build``, saved (without compiling an ORM query: this is on the hot path)."""
    made = build(call, **decided)
    insert_returning_id(made)
    return made


# What a retry of a call shares with the call it retries.
_RETRY_COPIES = (
    "step_id",
    "run",
    "tool",
    "input_hash",
    "input",
    "idempotency",
    "replay_policy",
    "destructive",
    "classification_reason",
    "classification_rule",
    "idempotency_key",
    "input_source",
    "end_user_id",
    "data_classification",
    "combination",
)


def add_retry(
    original: LedgerEntry,
    *,
    caller: Caller,
    record: IdempotencyRecord,
    decision: Decision,
    code: str,
    lease: Lease | None,
) -> LedgerEntry:
    """A new entry for a retry of ``original``: same action, new caller and decision."""
    return LedgerEntry.objects.create(
        tenant=caller.tenant,
        caller_token=caller.token,
        agent_id=caller.agent_id,
        record=record,
        decision=decision,
        observation_code=code,
        status=EntryStatus.STARTED if lease else EntryStatus.PLANNED,
        reused_record=True,
        fencing_token=lease.fencing_token if lease else None,
        started_at=Now() if lease else None,
        **{field: getattr(original, field) for field in _RETRY_COPIES},
    )
