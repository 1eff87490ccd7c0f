"""The ledger entry of each call, written before the tool runs (DESIGN section 4), by one
builder (``build``) for every kind of call: a new call (``new_call``), a retry, which shares
the action of the call it retries (``retry_of``), and a compensation, a call the ledger makes
for a human (``compensating_call``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ledger.calls.values import Caller, CallInput, entry_classification
from ledger.classification import Classification
from ledger.classification.calls import classify_tool_call
from ledger.domain import DataClassification, Decision, EntryStatus, InputSource, RecordState
from ledger.keys import fingerprint
from ledger.models import (
    IdempotencyRecord,
    LedgerEntry,
    Run,
    Tenant,
    Tool,
    VersionCombination,
    WorkspaceRoot,
)
from ledger.records.reserve import count_duplicate_sql
from ledger.redaction import redact_for_storage
from ledger.sql.statements import DbTime, insert_returning_id, run_precompiled

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
    """What every entry of one call shares, whatever its decision: who calls, and the call as
    the ledger stores it (``input`` redacted by ``data_classification``)."""

    caller: Caller
    run: Run
    tool: Tool
    step_id: str
    input: Any
    input_hash: str
    classification: Classification
    key: str
    input_source: str
    end_user_id: str
    data_classification: DataClassification
    combination: VersionCombination | None


def new_call(
    caller: Caller,
    run: Run,
    tool: Tool,
    request: CallInput,
    input_hash: str,
    classification: Classification,
    key: str,
) -> NewCall:
    """A runtime's call (``classification`` is ``classify_tool_call``'s): its input redacted
    for storage by the data classification the runtime declares."""
    return NewCall(
        caller=caller,
        run=run,
        tool=tool,
        step_id=request.step_id,
        input=redact_for_storage(request.input, request.data_classification),
        input_hash=input_hash,
        classification=classification,
        key=key,
        input_source=request.input_source,
        end_user_id=request.end_user_id,
        data_classification=request.data_classification,
        combination=run.combination,
    )


def retry_of(original: LedgerEntry, caller: Caller) -> NewCall:
    """A retry of ``original``'s call by ``caller``: the same action, so the same step, input
    (as stored: redacting it again would hash a restricted input's hash), classification and
    key."""
    return NewCall(
        caller=caller,
        run=original.run,
        tool=original.tool,
        step_id=original.step_id,
        input=original.input,
        input_hash=original.input_hash,
        classification=entry_classification(original),
        key=original.idempotency_key,
        input_source=original.input_source,
        end_user_id=original.end_user_id,
        data_classification=DataClassification(original.data_classification),
        combination=original.combination,
    )


def compensating_call(
    *,
    tenant: Tenant,
    run: Run,
    tool: Tool,
    step_id: str,
    arguments: dict[str, Any],
    key: str,
    data_classification: DataClassification,
) -> NewCall:
    """The call that compensates an action, asked for by a human (so no token calls it), in
    ``run``: classified from its arguments as any call is, its arguments stored as the
    original action's data classification allows."""
    return NewCall(
        caller=Caller(tenant, None),
        run=run,
        tool=tool,
        step_id=step_id,
        input=redact_for_storage(arguments, data_classification),
        input_hash=fingerprint(arguments),
        classification=classify_tool_call(tool, arguments, roots=WorkspaceRoot.paths_for(tool)),
        key=key,
        input_source=InputSource.USER,
        end_user_id="",
        data_classification=data_classification,
        combination=run.combination,
    )


def build(
    call: NewCall,
    *,
    decision: Decision,
    record: IdempotencyRecord | None,
    code: str = "",
    reused_record: bool = False,
) -> LedgerEntry:
    """The entry of a call (not saved), in the status its decision gives it: started with the
    record's fencing token to execute, finished as the record ended for its recorded result,
    else planned."""
    caller, classification = call.caller, call.classification
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
        step_id=call.step_id,
        run=call.run,
        tool=call.tool,
        input_hash=call.input_hash,
        input=call.input,
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
        input_source=call.input_source,
        caller_token=caller.token,
        agent_id=caller.agent_id,
        end_user_id=call.end_user_id,
        data_classification=call.data_classification,
        combination=call.combination,
        fencing_token=record.fencing_token if decision is Decision.EXECUTE and record else None,
        started_at=now if decision is Decision.EXECUTE else None,
        finished_at=now if decision is Decision.RECORDED_RESULT else None,
        reused_record=reused_record,
    )


def told(entry: LedgerEntry, observation: dict[str, Any] | None) -> None:
    """Keep with ``entry`` what the model is told about its decision (``observation_for``), as
    given: on an entry not yet inserted it costs no statement (the hot path's duplicate is
    entered with it); an entry already saved, whose observation names what was written after
    it (an approval request, say), is updated. Nothing for a call told to go ahead."""
    entry.observation = observation
    if observation is not None and not entry._state.adding:
        LedgerEntry.objects.filter(pk=entry.pk).update(observation=observation)


def add(call: NewCall, **decided: Any) -> LedgerEntry:
    """``build``, saved (without compiling an ORM query: this is on the hot path)."""
    made = build(call, **decided)
    insert_returning_id(made)
    return made


def add_retry(call: NewCall, **decided: Any) -> LedgerEntry:
    """``add`` for a retry of a call (``retry_of``), counted on its record when it is a dedup
    hit (``LedgerEntry.dedup_hit``), as ``records.reserve_key`` and
    ``records.count_duplicate_as_seen`` count a duplicate with its answer: the record's
    ``duplicate_hits`` agrees with the metric."""
    made = add(call, reused_record=True, **decided)
    if made.dedup_hit and made.record is not None:
        run_precompiled(count_duplicate_sql(), [made.record.pk])
        made.record.duplicate_hits += 1
    return made
