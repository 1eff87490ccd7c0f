"""A holder's report of its execution: recorded once, under the record's lock, if its fencing
token is current (DESIGN section 3); refused and audited otherwise. A report that contradicts
a settled failure makes the outcome unknown again and asks a human."""

from __future__ import annotations

import json
from datetime import datetime
from functools import partial
from typing import Any

from django.db import connection, transaction

from ledger.domain import DataClassification, EntryStatus, EscalationKind, RecordState
from ledger.errors import LedgerError, RecordSettled, ResultConflict, StaleFencingToken
from ledger.models import AuditEvent, IdempotencyRecord, LedgerEntry
from ledger.records import transitions
from ledger.records.escalation import escalated_as
from ledger.records.locking import lock_record
from ledger.records.transitions import Outcome
from ledger.redaction import RESULT_MAX_TEXT, redact_for_storage, strictest
from ledger.services.audit import audit
from ledger.services.entries import transition_entry

# Why a completion report is refused.
REFUSED_STALE = "stale"
REFUSED_SETTLED = "settled"
REFUSED_DIFFERENT_RESULT = "different_result"
# The token is not the reporting call's own (``ledger.calls.complete_call`` knows the call).
REFUSED_OTHER_CALL = "other_call"


class CompletionRefused(Exception):
    """A completion report that must be refused: a stale token or one that is not the
    reporting call's, or a record already settled otherwise. Raised before anything is
    written; ``refuse_completion`` audits it."""

    def __init__(
        self,
        record: IdempotencyRecord,
        *,
        reason: str,
        fencing_token: int,
        outcome: Outcome,
        actor: str,
        source: str,
    ) -> None:
        super().__init__(reason)
        self.record = record
        self.reason = reason
        self.fencing_token = fencing_token
        self.outcome = outcome
        self.actor = actor
        self.source = source


def refuse_completion(refused: CompletionRefused) -> LedgerError:
    """Audit a refused report (call it outside the failed transaction, so the event outlives
    the error) and return the error to raise."""
    record = refused.record
    audit(
        tenant=record.tenant_id,
        actor=refused.actor,
        action="record.complete_refused",
        target=record,
        source=refused.source,
        outcome=AuditEvent.Result.DENIED,
        detail=f"token {refused.fencing_token} reported {refused.outcome.value}; record is "
        f"{record.state} with token {record.fencing_token}",
    )
    if refused.reason == REFUSED_STALE:
        return StaleFencingToken(
            f"fencing token {refused.fencing_token} is stale (current is {record.fencing_token})"
        )
    if refused.reason == REFUSED_OTHER_CALL:
        return StaleFencingToken(
            f"fencing token {refused.fencing_token} does not belong to this call"
        )
    if refused.reason == REFUSED_DIFFERENT_RESULT:
        return ResultConflict(
            "this call's result was already recorded, and the report differs from it; the "
            "recorded result stands"
        )
    return RecordSettled(
        f"the outcome was already found: the record is {record.state}; the report changes nothing"
    )


def complete_execution(
    *,
    record: IdempotencyRecord,
    fencing_token: int,
    outcome: Outcome,
    actor: str,
    source: str = AuditEvent.Source.API,
    result: Any = None,
    error: dict[str, Any] | None = None,
    retryable: bool = False,
    entry: LedgerEntry | None = None,
    evidence: Any = None,
) -> IdempotencyRecord:
    """Record the outcome reported by the holder of ``fencing_token``.

    When ``entry`` (the ledger entry of the reporting call) is given, its status changes in
    the same transaction. What is stored is redacted as ``stored_classification`` says.

    A late report for a record whose lease lapsed (now ``unknown``) is accepted when the token is
    still current: it is the best evidence there is. A report with an older token is refused and
    the refusal is audited.
    """
    try:
        with transaction.atomic():
            locked, now = lock_record(record.pk)
            return complete_locked(
                locked,
                now=now,
                fencing_token=fencing_token,
                outcome=outcome,
                actor=actor,
                source=source,
                result=result,
                error=error,
                retryable=retryable,
                entry=entry,
                evidence=evidence,
            )
    except CompletionRefused as refused:
        raise refuse_completion(refused) from None


def complete_locked(
    locked: IdempotencyRecord,
    *,
    now: datetime,
    fencing_token: int,
    outcome: Outcome,
    actor: str,
    source: str = AuditEvent.Source.API,
    result: Any = None,
    error: dict[str, Any] | None = None,
    retryable: bool = False,
    entry: LedgerEntry | None = None,
    evidence: Any = None,
) -> IdempotencyRecord:
    """``complete_execution`` for a caller that already holds ``locked`` (read ``SELECT ...
    FOR UPDATE`` in its open transaction, with ``now``, the database's clock after the lock).
    Raises ``CompletionRefused`` without writing."""
    reported = transitions.REPORTED[outcome]
    target = reported.target
    refused = partial(
        CompletionRefused,
        locked,
        fencing_token=fencing_token,
        outcome=outcome,
        actor=actor,
        source=source,
    )
    if locked.fencing_token != fencing_token:
        raise refused(reason=REFUSED_STALE)
    data_classification = stored_classification(locked, entry)
    stored = (
        redact_for_storage(result, data_classification, limit=RESULT_MAX_TEXT)
        if target is RecordState.SUCCEEDED
        else None
    )
    if locked.state == target.value:
        if target is RecordState.SUCCEEDED and not _same_json(stored, locked.result):
            if _succeeded_by_report(locked):
                # One token, two different results: two holders, the case fencing exists for.
                raise refused(reason=REFUSED_DIFFERENT_RESULT)
            raise refused(reason=REFUSED_SETTLED)  # a look-up or a human found it first
        # The same report again (a retry after a lost response): nothing new to record.
        assert reported.entry_status is not None
        if entry is not None and entry.status != reported.entry_status:
            changes = {
                **transitions.entry_finished(reported.entry_status, now),
                **_evidence(evidence, data_classification),
            }
            transition_entry(entry, reported.entry_status, **changes)
        return locked
    if locked.state in transitions.CONTRADICTED.sources:
        _contradicted(locked, outcome, now=now, actor=actor, source=source, entry=entry)
        return locked
    if _already_contradicted(locked):
        return locked  # a report after a contradiction: a human has the facts already
    if locked.state not in reported.sources:
        raise refused(reason=REFUSED_SETTLED)
    transitions.run(
        reported,
        locked,
        now=now,
        actor=actor,
        source=source,
        entry=entry,
        entry_changes=_evidence(evidence, data_classification),
        result=stored,
        error=redact_for_storage(error, data_classification) if error else None,
        error_retryable=retryable and target is RecordState.FAILED_FINAL,
    )
    return locked


def stored_classification(
    record: IdempotencyRecord, entry: LedgerEntry | None = None
) -> DataClassification:
    """The data classification what is stored of an action's outcome is redacted by: the
    action's (its record's, declared by the call that reserved it), or the reporting call's
    (``entry``) when that one is stricter, so a report is never kept with less redaction than
    its caller asked for. Every result, error and evidence the records store is redacted by
    it (``complete_locked``, ``resolve.resolve_locked``, ``reconcile.services._apply``)."""
    if entry is None:
        return DataClassification(record.data_classification)
    return strictest(record.data_classification, entry.data_classification)


def _evidence(evidence: Any, data_classification: DataClassification) -> dict[str, Any]:
    """What a report's evidence adds to its ledger entry, redacted for storage."""
    if evidence is None:
        return {}
    return {"side_effects": [{"evidence": redact_for_storage(evidence, data_classification)}]}


def _same_json(reported: Any, recorded: Any) -> bool:
    """Whether two results are the same JSON as PostgreSQL stores it (``1e23`` is the number
    ``100000000000000000000000`` once stored): compared as jsonb only when Python's equality
    says they differ."""
    if reported == recorded:
        return True
    with connection.cursor() as cursor:
        cursor.execute("SELECT %s::jsonb = %s::jsonb", [json.dumps(reported), json.dumps(recorded)])
        row = cursor.fetchone()
    return bool(row and row[0])


def _succeeded_by_report(record: IdempotencyRecord) -> bool:
    """Whether the record's success was recorded from its holder's report (not from a
    look-up or a human's resolution): its last state change in the audit log says."""
    last = (
        AuditEvent.objects.filter(
            target_type="idempotencyrecord", target_id=str(record.pk), action__startswith="record."
        )
        .exclude(outcome=AuditEvent.Result.DENIED)
        .order_by("-pk")
        .values_list("action", flat=True)
        .first()
    )
    return last == transitions.REPORTED[Outcome.SUCCEEDED].action


CONTRADICTION_ESCALATION = (
    "The ledger had settled this action as failed with no effect (so a retry was safe), then "
    "its executor, holding the current fencing token, reported {outcome}: the tool ran after "
    "all. Check the downstream for a duplicate before anyone retries."
)


def _already_contradicted(record: IdempotencyRecord) -> bool:
    """Whether a human already has ``record`` for a contradicted settlement: one more query,
    on the row the caller holds locked, only for a report on an unknown record."""
    if record.state != RecordState.UNKNOWN:
        return False
    contradicted = escalated_as(EscalationKind.CONTRADICTED_SETTLEMENT)
    return IdempotencyRecord.objects.filter(contradicted, pk=record.pk).exists()


def _contradicted(
    locked: IdempotencyRecord,
    outcome: Outcome,
    *,
    now: datetime,
    actor: str,
    source: str,
    entry: LedgerEntry | None,
) -> None:
    """A report that contradicts a settled failure: the action was known not to have happened
    (a look-up found nothing, or a human said so), and the current holder now says it ran, or
    may have. Neither fact wins: the record becomes ``unknown``, is no longer safe to retry,
    and goes to a human with both facts; the model is told the side effect is uncertain."""
    reason = CONTRADICTION_ESCALATION.format(outcome=outcome.value)
    uncertain = transitions.CONTRADICTED.entry_status
    transitions.run(
        transitions.CONTRADICTED,
        locked,
        now=now,
        actor=actor,
        source=source,
        detail=f"was failed_final ({(locked.error or {}).get('code', 'FAILED')}); {reason}",
        entry=entry
        if entry is not None and uncertain in LedgerEntry.TRANSITIONS[EntryStatus(entry.status)]
        else None,
        escalated_at=now,
        escalation_reason=reason,
    )
