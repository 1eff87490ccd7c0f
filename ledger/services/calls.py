"""The call protocol a runtime follows for every tool call (DESIGN sections 3-6).

``record_call`` is the hot path: it writes the ledger entry *before* the tool runs, classifies
the call, builds the key, fingerprints the input, reserves the key and returns the decision with
its model-facing observation. ``start_call``, ``heartbeat_call``, ``complete_call`` and
``replay_call`` follow it; ``call_status`` and ``record_by_key`` look things up.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from functools import cache, partial
from typing import Any

import jsonschema
from django.db import connection, transaction
from django.db.models.functions import Now

from ledger import shadow
from ledger.classification import Classification
from ledger.classification.calls import classify_tool_call
from ledger.decisions import RecoveryAction, WriteCheck, check_write_plan, recovery_decision
from ledger.domain import (
    FINAL_ERROR_CODES,
    WRITE_CONFLICT_ESCALATION,
    DataClassification,
    Decision,
    EntryStatus,
    Idempotency,
    InputSource,
    KeyScope,
    ObservationCode,
    RecordState,
    ReplayPolicy,
)
from ledger.errors import (
    ApprovalError,
    InvalidInput,
    InvalidTransition,
    InvalidWritePlan,
    NotFound,
    RunNotRunning,
    StaleFencingToken,
)
from ledger.keys import KeyBuildError, build_idempotency_key, business_object_from, fingerprint
from ledger.models import (
    ApiToken,
    ApprovalRequest,
    AuditEvent,
    IdempotencyRecord,
    LedgerEntry,
    Run,
    Tenant,
    Tool,
    VersionCombination,
    WritePlan,
)
from ledger.observations import CallContext, refusal, success
from ledger.paths import workspace_path_problem
from ledger.redaction import is_altered, redact_for_storage
from ledger.services import approvals, records
from ledger.services.audit import audit
from ledger.services.entries import transition_entry
from ledger.services.records import Outcome
from ledger.services.registry import ensure_catalogue_tool, validate_tool_name
from ledger.services.statements import (
    DbTime,
    fetch_joined,
    insert_returning_id,
    quote,
    select_columns,
)

RETRY_AFTER_SECONDS = 2


@dataclass(frozen=True, slots=True)
class Caller:
    """Who is calling: the tenant's token and the agent it acts for."""

    tenant: Tenant
    token: ApiToken | None
    agent_id: str = ""

    @property
    def identity(self) -> str:
        token = f"token:{self.token.prefix}" if self.token else "system"
        return f"{token}/{self.agent_id}" if self.agent_id else token

    @property
    def user_id(self) -> int | None:
        """The user behind the call: its token's owner."""
        return self.token.user_id if self.token else None


@dataclass(frozen=True, slots=True)
class WritePlanInput:
    workspace: str
    path: str
    before_hash: str
    after_hash: str
    diff: str = ""
    patch_ref: str = ""


@dataclass(frozen=True, slots=True)
class CallInput:
    run_id: str
    step_id: str
    tool: str
    input: dict[str, Any]
    business_object_id: str | None = None
    input_source: InputSource = InputSource.MODEL
    data_classification: DataClassification = DataClassification.INTERNAL
    end_user_id: str = ""
    write_plan: WritePlanInput | None = None


@dataclass(frozen=True, slots=True)
class Lease:
    fencing_token: int
    expires_at: datetime


@dataclass(slots=True)
class CallResult:
    """A decision about one call, with everything the API returns for it."""

    entry: LedgerEntry
    decision: Decision
    classification: Classification
    observation: dict[str, Any] | None = None
    lease: Lease | None = None
    approval: ApprovalRequest | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def http_status(self) -> int:
        if self.decision is Decision.WAIT:
            return 409
        if self.decision is Decision.CONFLICT:
            return 422
        return 200


def classify_call(tool: Tool, tool_input: dict[str, Any]) -> Classification:
    """The classification of one call (``ledger.classification.calls``)."""
    return classify_tool_call(tool, tool_input)


def _run_and_tool(tenant: Tenant, run_id: str, tool_name: str) -> tuple[Run, Tool | None]:
    """The running run (with its combination) and the registered tool, in one query."""
    found = fetch_joined(
        _run_and_tool_sql(), [tool_name, tenant.pk, run_id], (Run, VersionCombination, Tool)
    )
    if found is None:
        raise NotFound(f"no run {run_id!r}: start it first")
    run, combination, tool = found
    assert isinstance(run, Run)
    run.combination = combination
    if run.status == Run.Status.FINISHED:
        raise RunNotRunning(f"run {run_id!r} has finished ({run.termination_reason})")
    return run, tool


@cache
def _run_and_tool_sql() -> str:
    return (
        f"SELECT {select_columns(Run, 'r')}, {select_columns(VersionCombination, 'c')}, "  # noqa: S608
        f"{select_columns(Tool, 't')} "
        f"FROM {quote(Run._meta.db_table)} r "
        f"LEFT JOIN {quote(VersionCombination._meta.db_table)} c ON c.id = r.combination_id "
        f"LEFT JOIN {quote(Tool._meta.db_table)} t ON t.tenant_id = r.tenant_id AND t.name = %s "
        "WHERE r.tenant_id = %s AND r.run_id = %s"
    )


def _tool(tenant: Tenant, name: str, actor: str, registered: Tool | None = None) -> Tool:
    validate_tool_name(name)
    tool = registered or Tool.objects.filter(tenant=tenant, name=name).first()
    return tool or ensure_catalogue_tool(tenant=tenant, name=name, actor=actor, source="api")


def _is_halted(run: Run) -> bool:
    combination = run.combination
    return run.status == Run.Status.HALTED or (
        combination is not None and combination.state == VersionCombination.State.HALTED
    )


def _context(entry: LedgerEntry, tool_name: str) -> CallContext:
    return CallContext(
        tool=tool_name,
        idempotency=Idempotency(entry.idempotency),
        replay_policy=ReplayPolicy(entry.replay_policy),
        idempotency_key=entry.idempotency_key or None,
        call_id=str(entry.call_id),
    )


def _key(tenant: Tenant, run: Run, tool: Tool, request: CallInput) -> str:
    try:
        business_object = request.business_object_id or business_object_from(
            tool.key_fields, request.input
        )
        return build_idempotency_key(
            scope=shadow.key_scope(run, KeyScope(tool.key_scope)),
            tenant=tenant.slug,
            user=run.user_id,
            run_id=run.run_id,
            tool=tool.name,
            business_object_id=business_object,
            step_id=request.step_id,
        )
    except KeyBuildError as exc:
        raise InvalidInput(str(exc)) from None


def _fingerprint(value: Any) -> str:
    try:
        return fingerprint(value)
    except ValueError as exc:
        raise InvalidInput(f"input cannot be fingerprinted: {exc}") from None


_ENTRY_STATUS_FOR = {
    Decision.EXECUTE: EntryStatus.STARTED,
    Decision.WAIT: EntryStatus.PLANNED,
    Decision.APPROVAL_REQUIRED: EntryStatus.PLANNED,
    Decision.FORBIDDEN: EntryStatus.PLANNED,
    Decision.CONFLICT: EntryStatus.PLANNED,
    Decision.SHADOW_DRY_RUN: EntryStatus.PLANNED,
}


def _entry(
    *,
    caller: Caller,
    run: Run,
    tool: Tool,
    request: CallInput,
    classification: Classification,
    input_hash: str,
    key: str,
    decision: Decision,
    record: IdempotencyRecord | None,
    code: str = "",
    reused_record: bool = False,
) -> LedgerEntry:
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
        run=run,
        tool=tool,
        input_hash=input_hash,
        input=redact_for_storage(request.input, request.data_classification),
        status=status,
        idempotency=classification.idempotency,
        replay_policy=classification.replay_policy,
        destructive=classification.destructive,
        classification_reason=classification.reason,
        classification_rule=classification.rule,
        idempotency_key=key,
        record=record,
        decision=decision,
        observation_code=code,
        input_source=request.input_source,
        caller_token=caller.token,
        agent_id=caller.agent_id,
        end_user_id=request.end_user_id,
        data_classification=request.data_classification,
        combination=run.combination,
        fencing_token=record.fencing_token if decision is Decision.EXECUTE and record else None,
        started_at=now if decision is Decision.EXECUTE else None,
        finished_at=now if decision is Decision.RECORDED_RESULT else None,
        reused_record=reused_record,
    )


def _new_entry(**kwargs: Any) -> LedgerEntry:
    """``_entry``, saved (without compiling an ORM query: this is on the hot path)."""
    entry = _entry(**kwargs)
    insert_returning_id(entry)
    return entry


def record_call(*, caller: Caller, request: CallInput) -> CallResult:
    """Record one call before it runs and decide what the runtime may do with it.

    SQL cost of a new key of a registered tool (the common case), three statements and no
    transaction: the token lookup (in the API's auth), the run and tool lookup (one query),
    and one statement that inserts the record (``ON CONFLICT DO NOTHING``), its audit event
    and the entry (``_first_call_of_key``). A duplicate whose answer is ``wait`` or
    ``recorded_result`` (a retry storm) is answered from the record that statement read, and
    counted and entered in one more statement if the record is unchanged: four statements,
    no transaction. Otherwise (another answer, the record changed in between, a first use of a
    catalogue tool, a write plan, a halted run) the general way, in one transaction: the
    reservation, then the entry; a duplicate (its key found taken by the one-statement way)
    locks the record, counts the duplicate and writes its entry.
    ``tests/api/test_statement_budget.py`` holds it to that.
    """
    if request.write_plan is not None:
        _check_write_plan(request.write_plan)
    run, registered = _run_and_tool(caller.tenant, request.run_id, request.tool)
    input_hash = _fingerprint(request.input)
    classified = None
    taken = False  # the one-statement way found the key taken
    if registered is not None:  # classified once, for the one-statement way and the general one
        classified = _classify(caller, run, registered, request)
        dry_run = shadow.dry_run_required(run, classified[0].idempotency)
        if request.write_plan is None and not _is_halted(run) and not dry_run:
            fast = _first_call_of_key(caller, run, registered, request, input_hash, *classified)
            if fast is not None:
                return fast
            taken = True
    # One transaction: a first use of a catalogue tool registers it, and an error anywhere
    # below (a bad key, say) must leave nothing behind.
    with transaction.atomic():
        tool = _tool(caller.tenant, request.tool, caller.identity, registered)
        classification, key = classified or _classify(caller, run, tool, request)
        new_entry = partial(
            _new_entry,
            caller=caller,
            run=run,
            tool=tool,
            request=request,
            classification=classification,
            input_hash=input_hash,
            key=key,
        )
        if _is_halted(run):
            entry = new_entry(
                decision=Decision.FORBIDDEN,
                record=None,
                code=ObservationCode.RUN_HALTED,
            )
            observation = refusal(
                ObservationCode.RUN_HALTED, _context(entry, tool.name), next_action="stop"
            )
            return CallResult(entry, Decision.FORBIDDEN, classification, observation)
        if shadow.dry_run_required(run, classification.idempotency):
            return _shadow_dry_run(new_entry, caller.tenant, tool, request, classification)
        reservation = records.reserve_key(
            tenant=caller.tenant,
            tool=tool,
            key=key,
            fingerprint=input_hash,
            replay_policy=classification.replay_policy,
            lease_owner=caller.identity,
            actor=caller.identity,
            run=run,
            combination=run.combination,
            taken=taken,
        )
        record = reservation.record
        entry = new_entry(
            decision=reservation.decision,
            record=record,
            code=reservation.code.value if reservation.code else "",
            reused_record=not reservation.created,
        )
        if request.write_plan is not None and reservation.created:
            _save_write_plan(caller.tenant, entry, request.write_plan)
        result = CallResult(entry, reservation.decision, classification)
        if reservation.decision is Decision.EXECUTE:
            result.lease = Lease(record.fencing_token, record.lease_expires_at)  # type: ignore[arg-type]
        elif reservation.decision is Decision.APPROVAL_REQUIRED:
            _ask_for_approval(result, record, caller)
        result.observation = _observation(result, record, tool.name, reservation.next_action)
    return result


def _shadow_dry_run(
    new_entry: Callable[..., LedgerEntry],
    tenant: Tenant,
    tool: Tool,
    request: CallInput,
    classification: Classification,
) -> CallResult:
    """A shadow run's side-effecting call: no reservation, nothing runs. Its entry (tool,
    classification, input fingerprint, the key it would have used) and its write plan (with
    the dry-run diff) are the evidence of the intended action (``ledger.shadow``)."""
    entry = new_entry(
        decision=Decision.SHADOW_DRY_RUN, record=None, code=ObservationCode.SHADOW_DRY_RUN
    )
    if request.write_plan is not None:
        _save_write_plan(tenant, entry, request.write_plan)
    observation = refusal(
        ObservationCode.SHADOW_DRY_RUN,
        _context(entry, tool.name),
        next_action="continue",
        retryable=False,
    )
    return CallResult(entry, Decision.SHADOW_DRY_RUN, classification, observation)


def _classify(
    caller: Caller, run: Run, tool: Tool, request: CallInput
) -> tuple[Classification, str]:
    """The call's classification and its idempotency key (raises on a bad input or key)."""
    return classify_call(tool, request.input), _key(caller.tenant, run, tool, request)


def _first_call_of_key(
    caller: Caller,
    run: Run,
    tool: Tool,
    request: CallInput,
    input_hash: str,
    classification: Classification,
    key: str,
) -> CallResult | None:
    """The common case, a key used for the first time by a registered tool in a running run:
    the record, its audit event and the entry in one statement, without a transaction
    (``records.reserve_new_key``). A duplicate (the key taken) is answered from the record
    that statement read when it can be (``_duplicate_as_seen``). None when neither could be
    done (or the database cannot): the caller then takes the general way, which answers from
    the locked record."""
    entry_for = partial(
        _entry,
        caller=caller,
        run=run,
        tool=tool,
        request=request,
        classification=classification,
        input_hash=input_hash,
        key=key,
    )
    entry = entry_for(decision=Decision.EXECUTE, record=None)
    first = records.reserve_new_key(
        tenant=caller.tenant,
        tool=tool,
        key=key,
        fingerprint=input_hash,
        replay_policy=classification.replay_policy,
        lease_owner=caller.identity,
        actor=caller.identity,
        run=run,
        entry=entry,
    )
    if first.created is not None:
        result = CallResult(entry, Decision.EXECUTE, classification)
        record = first.created
        result.lease = Lease(record.fencing_token, record.lease_expires_at)  # type: ignore[arg-type]
        return result
    if first.seen is None:
        return None
    return _duplicate_as_seen(
        first.seen, first.seen_lapsed, tool, input_hash, classification, entry_for
    )


def _duplicate_as_seen(
    seen: IdempotencyRecord,
    lapsed: bool,
    tool: Tool,
    input_hash: str,
    classification: Classification,
    entry_for: Callable[..., LedgerEntry],
) -> CallResult | None:
    """A duplicate answered from its record as read, without a lock or a transaction: the
    retry storm's ``wait`` and ``recorded_result``, counted and entered in one statement that
    checks the record has not changed since (``records.count_duplicate_as_seen``). None for
    an answer that needs the record's lock, or when the record changed in between."""
    reservation = records.answer_as_seen(
        seen,
        fingerprint=input_hash,
        replay_policy=classification.replay_policy,
        lapsed=lapsed,
    )
    if reservation is None:
        return None
    entry = entry_for(
        decision=reservation.decision,
        record=seen,
        code=reservation.code.value if reservation.code else "",
        reused_record=True,
    )
    if not records.count_duplicate_as_seen(seen, entry):
        return None
    result = CallResult(entry, reservation.decision, classification)
    result.observation = _observation(result, seen, tool.name, reservation.next_action)
    return result


def _check_write_plan(plan: WritePlanInput) -> None:
    """Refuse a malformed write plan before anything is written (422 for a path that cannot
    name a file inside the workspace)."""
    for label, value in (("before_hash", plan.before_hash), ("after_hash", plan.after_hash)):
        if len(value) != 64 or any(ch not in "0123456789abcdef" for ch in value):
            raise InvalidInput(f"write_plan.{label} must be a lowercase sha256 hex digest")
    if not plan.workspace:
        raise InvalidInput("write_plan needs a workspace and a path")
    problem = workspace_path_problem(plan.path)
    if problem is not None:
        raise InvalidWritePlan(f"write_plan.path {plan.path!r}: {problem}")


def _save_write_plan(tenant: Tenant, entry: LedgerEntry, plan: WritePlanInput) -> None:
    WritePlan.objects.create(
        tenant=tenant,
        entry=entry,
        workspace=plan.workspace,
        path=plan.path,
        before_hash=plan.before_hash,
        after_hash=plan.after_hash,
        diff=plan.diff,
        patch_ref=plan.patch_ref,
    )


def _rejection_of(record: IdempotencyRecord, entry: LedgerEntry) -> ApprovalRequest | None:
    """The record's latest approval request, if a human rejected this exact action in it:
    the rejection stands, and the same action is not put to a human again."""
    latest = ApprovalRequest.objects.filter(record=record).order_by("-pk").first()
    if (
        latest is not None
        and latest.state == ApprovalRequest.State.REJECTED
        and latest.action_hash == approvals.action_hash(entry)
    ):
        return latest
    return None


def _ask_for_approval(result: CallResult, record: IdempotencyRecord, caller: Caller) -> None:
    """Open (or join) the approval request, unless this exact action was already rejected."""
    latest = _rejection_of(record, result.entry)
    if latest is not None:
        result.decision = Decision.FORBIDDEN
        result.approval = latest
        LedgerEntry.objects.filter(pk=result.entry.pk).update(
            decision=Decision.FORBIDDEN, observation_code=ObservationCode.APPROVAL_REJECTED
        )
        return
    result.approval = approvals.request_approval(
        record=record, entry=result.entry, requested_by=caller.identity, requester_id=caller.user_id
    )


def _observation(
    result: CallResult, record: IdempotencyRecord | None, tool_name: str, next_action: str
) -> dict[str, Any] | None:
    context = _context(result.entry, tool_name)
    decision = result.decision
    if decision is Decision.EXECUTE:
        return None
    if decision is Decision.RECORDED_RESULT and record is not None:
        if record.state == RecordState.SUCCEEDED:
            altered = {"result_redacted": True} if is_altered(record.result) else None
            return success(record.result, context, replayed=True, extra=altered)
        error = record.error or {}
        retryable = record.error_retryable and error.get("code") not in FINAL_ERROR_CODES
        return refusal(
            ObservationCode.FAILED,
            context,
            next_action=next_action,
            detail=str(error.get("message") or error.get("code") or "no detail"),
            retryable=retryable,
            error_code=str(error.get("code") or "FAILED"),
            extra={"replayed": True},
        )
    if decision is Decision.WAIT:
        return refusal(
            ObservationCode.IN_PROGRESS,
            context,
            next_action="wait",
            extra={"retry_after_seconds": RETRY_AFTER_SECONDS},
        )
    if decision is Decision.APPROVAL_REQUIRED:
        extra = {"approval_id": result.approval.pk} if result.approval else {}
        return refusal(
            ObservationCode.APPROVAL_REQUIRED, context, next_action="await_approval", extra=extra
        )
    if decision is Decision.CONFLICT:
        return refusal(ObservationCode.IDEMPOTENCY_KEY_CONFLICT, context, next_action="stop")
    if result.approval is not None and result.approval.state == ApprovalRequest.State.REJECTED:
        return refusal(
            ObservationCode.APPROVAL_REJECTED,
            context,
            next_action="stop",
            detail=result.approval.decision_reason,
        )
    code = ObservationCode(result.entry.observation_code or ObservationCode.SIDE_EFFECT_UNCERTAIN)
    return refusal(code, context, next_action=next_action)


def _entry_for(caller: Caller, call_id: str) -> LedgerEntry:
    entry = (
        LedgerEntry.objects.select_related("tool", "record", "combination", "run")
        .filter(tenant=caller.tenant, call_id=call_id)
        .first()
    )
    if entry is None:
        raise NotFound(f"no call {call_id}")
    return entry


def start_call(*, caller: Caller, call_id: str) -> CallResult:
    """Start a call whose approval was granted; the approval is used up in the same step."""
    entry = _entry_for(caller, call_id)
    shadow.refuse_follow_up(entry.run, entry.decision)
    record = entry.record
    if record is None or entry.decision != Decision.APPROVAL_REQUIRED:
        raise InvalidTransition("only a call that was waiting for approval can be started")
    try:
        with transaction.atomic():
            # The record first, then its approval: the order every settling transition takes
            # (it locks the record, then voids open approvals), so the two cannot deadlock.
            IdempotencyRecord.objects.select_for_update().filter(pk=record.pk).first()
            approvals.consume(record=record, entry=entry, actor=caller.identity)
            started = records.start_execution(
                record=record, lease_owner=caller.identity, actor=caller.identity, approved=True
            )
            transition_entry(entry, EntryStatus.APPROVED)
            transition_entry(
                entry,
                EntryStatus.STARTED,
                started_at=Now(),
                fencing_token=started.fencing_token,
            )
    except approvals.ApprovalVoid as void:
        approvals.invalidate(approval=void.approval, actor=caller.identity, detail=str(void))
        raise ApprovalError(str(void)) from None
    result = CallResult(entry, Decision.EXECUTE, _entry_classification(entry))
    result.lease = Lease(started.fencing_token, started.lease_expires_at)  # type: ignore[arg-type]
    return result


def _entry_classification(entry: LedgerEntry) -> Classification:
    return Classification(
        Idempotency(entry.idempotency),
        ReplayPolicy(entry.replay_policy),
        entry.destructive,
        entry.classification_reason,
        entry.classification_rule,
    )


def heartbeat_call(*, caller: Caller, call_id: str, fencing_token: int) -> datetime:
    entry = _entry_for(caller, call_id)
    if entry.record is None:
        raise InvalidTransition("this call holds no lease")
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
        return f"the result does not match {tool.name}'s output schema: {exc.message}"
    except jsonschema.SchemaError:
        return f"{tool.name}'s output schema is invalid; the result cannot be trusted"
    return None


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
    """Record how a call ended. A result that fails the tool's output schema is not a success:
    the side effect may have happened, so the call becomes uncertain.
    """
    notes: list[str] = []
    try:
        # The record is locked by the same query that reads the entry (one round trip); the
        # report is validated and applied under that lock, in one transaction.
        with transaction.atomic():
            entry, now = _entry_with_locked_record(caller, call_id)
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
                raise StaleFencingToken("the fencing token does not belong to this call")
            if outcome is Outcome.SUCCEEDED:
                problem = _validate_result(entry.tool, result)
                if problem is not None:
                    notes.append(problem)
                    outcome = Outcome.UNCERTAIN
                    error = {"code": "MALFORMED_RESULT", "message": problem}
            if outcome is Outcome.FAILED and error is None:
                raise InvalidInput("a failed call needs an error with a code")
            if error is not None and error.get("code") in FINAL_ERROR_CODES:
                retryable = False
            updated = records.complete_locked(
                record,
                now=now,
                fencing_token=fencing_token,
                outcome=outcome,
                actor=caller.identity,
                result=result,
                error=error,
                retryable=retryable,
                data_classification=DataClassification(entry.data_classification),
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
            "observation": current_observation(entry, None),
        }
        raise refusal from None
    entry.record = updated
    if updated.state == RecordState.UNKNOWN and updated.escalated_at is not None:
        notes.append(updated.escalation_reason)
    observation = current_observation(entry, None)
    return CallResult(
        entry, Decision.EXECUTE, _entry_classification(entry), observation, notes=notes
    )


def _entry_with_locked_record(caller: Caller, call_id: str) -> tuple[LedgerEntry, datetime]:
    """The entry with its tool and run, and its record locked (``FOR UPDATE OF`` the record
    only), and the database's clock once the lock is held. Raises when there is no such call
    or it has no record."""
    call_field = LedgerEntry._meta.get_field("call_id")
    found = fetch_joined(
        _entry_with_locked_record_sql(),
        [caller.tenant.pk, call_field.get_db_prep_value(call_id, connection)],
        (LedgerEntry, IdempotencyRecord, Tool, Run),
        trailing=1,
    )
    if found is None:
        _entry_for(caller, call_id)  # NotFound when there is no such call at all
        raise InvalidTransition("this call was never started, so it cannot be completed")
    entry, record, tool, run, now = found
    assert isinstance(entry, LedgerEntry)
    entry.record = record
    entry.tool = tool
    entry.run = run
    return entry, now


@cache
def _entry_with_locked_record_sql() -> str:
    # Written out: it runs on every completion, and the ORM spent more time compiling the
    # four-table select_related than PostgreSQL spent answering it (docs/performance.md). The
    # clock is read by the outer query, once the inner one holds the lock.
    return (
        f"SELECT {select_columns(LedgerEntry, 'e')}, {select_columns(IdempotencyRecord, 'r')}, "  # noqa: S608
        f"{select_columns(Tool, 't')}, {select_columns(Run, 'u')}, clock_timestamp() FROM ("
        f"SELECT e.id AS entry_id, r.* FROM {quote(LedgerEntry._meta.db_table)} e "
        f"JOIN {quote(IdempotencyRecord._meta.db_table)} r ON r.id = e.record_id "
        "WHERE e.tenant_id = %s AND e.call_id = %s FOR UPDATE OF r) r "
        f"JOIN {quote(LedgerEntry._meta.db_table)} e ON e.id = r.entry_id "
        f"JOIN {quote(Tool._meta.db_table)} t ON t.id = e.tool_id "
        f"JOIN {quote(Run._meta.db_table)} u ON u.id = e.run_id"
    )


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


def _retry_entry(
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


def replay_call(*, caller: Caller, call_id: str, current_hash: str | None = None) -> CallResult:
    """The recovery decision for a call that ended uncertain or failed (DESIGN section 4).

    The replay request is itself a new ledger entry pointing at the same record.
    """
    original = _entry_for(caller, call_id)
    shadow.refuse_follow_up(original.run, original.decision)
    record = original.record
    if record is None:
        raise InvalidTransition("this call has no idempotency record to recover")
    classification = _entry_classification(original)
    with transaction.atomic():
        locked = IdempotencyRecord.objects.select_for_update().get(pk=record.pk)
        state = RecordState(locked.state)
        error = locked.error or {}
        decision, code, next_action, approval, lease = _recover(
            caller, original, locked, state, error, current_hash
        )
        entry = _retry_entry(
            original,
            caller=caller,
            record=locked,
            decision=decision,
            code=code.value if code else "",
            lease=lease,
        )
        if decision is Decision.APPROVAL_REQUIRED and approval is None:
            approval = _rejection_of(locked, entry)
            if approval is not None:
                decision, code, next_action = (
                    Decision.FORBIDDEN,
                    ObservationCode.APPROVAL_REJECTED,
                    "stop",
                )
                LedgerEntry.objects.filter(pk=entry.pk).update(
                    decision=decision, observation_code=code.value
                )
                entry.decision, entry.observation_code = decision, code.value
            else:
                approval = approvals.request_approval(
                    record=locked,
                    entry=entry,
                    requested_by=caller.identity,
                    requester_id=caller.user_id,
                    **_condition(locked, current_hash),
                )
    result = CallResult(entry, decision, classification, lease=lease, approval=approval)
    context = _context(entry, original.tool.name)
    if decision is Decision.EXECUTE:
        return result
    if decision is Decision.RECORDED_RESULT:
        if code is ObservationCode.ALREADY_APPLIED:
            result.observation = {
                **success(locked.result, context, replayed=False),
                "code": code.value,
            }
        else:
            result.observation = _observation(result, locked, original.tool.name, next_action)
        return result
    extra = {"approval_id": approval.pk} if approval else {}
    result.observation = refusal(
        code or ObservationCode.REPLAY_FORBIDDEN,
        context,
        next_action=next_action,
        extra=extra,
        detail=approval.decision_reason if approval else "",
    )
    return result


def _recover(
    caller: Caller,
    original: LedgerEntry,
    record: IdempotencyRecord,
    state: RecordState,
    error: dict[str, Any],
    current_hash: str | None,
) -> tuple[Decision, ObservationCode | None, str, ApprovalRequest | None, Lease | None]:
    if state is RecordState.SUCCEEDED:
        return Decision.RECORDED_RESULT, None, "use_result", None, None
    if state in (RecordState.RESERVED, RecordState.EXECUTING):
        return Decision.WAIT, ObservationCode.IN_PROGRESS, "wait", None, None
    recovery = recovery_decision(
        replay_policy=ReplayPolicy(original.replay_policy),
        uncertain=state is RecordState.UNKNOWN,
        error_code=error.get("code"),
        error_final=state is RecordState.FAILED_FINAL and not record.error_retryable,
    )
    approval = approvals.open_approval(record)
    if recovery.action is RecoveryAction.REPLAY:
        records.start_execution(
            record=record, lease_owner=caller.identity, actor=caller.identity, approved=True
        )
        record.refresh_from_db()
        lease = Lease(record.fencing_token, record.lease_expires_at)  # type: ignore[arg-type]
        return Decision.EXECUTE, None, "execute", None, lease
    if recovery.action is RecoveryAction.CHECK_CONDITION:
        plan = WritePlan.objects.filter(entry__record=record).order_by("pk").first()
        if plan is not None and current_hash:
            check = check_write_plan(
                current_hash=current_hash, before_hash=plan.before_hash, after_hash=plan.after_hash
            )
            if check is WriteCheck.ALREADY_APPLIED:
                records.resolve_unknown(
                    record=record,
                    outcome=Outcome.SUCCEEDED,
                    actor=caller.identity,
                    result={"already_applied": True, "path": plan.path},
                    detail="the file already has the planned content (after_hash)",
                )
                return (
                    Decision.RECORDED_RESULT,
                    ObservationCode.ALREADY_APPLIED,
                    "use_result",
                    None,
                    None,
                )
            if check is WriteCheck.CONFLICT:
                _escalate_conflict(record, caller.identity)
                return Decision.FORBIDDEN, ObservationCode.WRITE_CONFLICT, "ask_human", None, None
        return (
            Decision.APPROVAL_REQUIRED,
            ObservationCode.APPROVAL_REQUIRED,
            "await_approval",
            approval,
            None,
        )
    if recovery.action is RecoveryAction.ASK_HUMAN:
        return (
            Decision.APPROVAL_REQUIRED,
            ObservationCode.APPROVAL_REQUIRED,
            "await_approval",
            approval,
            None,
        )
    if recovery.action is RecoveryAction.LOOKUP:
        return Decision.FORBIDDEN, ObservationCode.SIDE_EFFECT_UNCERTAIN, "lookup", None, None
    return Decision.FORBIDDEN, recovery.code, "stop", None, None


def _escalate_conflict(record: IdempotencyRecord, actor: str) -> None:
    """A conflict needs a human: hand the action to one (once), as a worker's check would."""
    escalated = IdempotencyRecord.objects.filter(pk=record.pk, escalated_at__isnull=True).update(
        escalated_at=Now(), escalation_reason=WRITE_CONFLICT_ESCALATION
    )
    if escalated:
        audit(
            tenant=record.tenant_id,
            actor=actor,
            action="reconcile.escalated",
            target=record,
            source=AuditEvent.Source.API,
            detail=WRITE_CONFLICT_ESCALATION,
        )


def _condition(record: IdempotencyRecord, current_hash: str | None) -> dict[str, str]:
    """What the approver is told about a conditional write's file, kept with the request."""
    plan = WritePlan.objects.filter(entry__record=record).order_by("pk").first()
    if plan is None:
        return {}
    if not current_hash:
        return {"detail": "the runtime sent no current hash of the file", "condition": ""}
    check = check_write_plan(
        current_hash=current_hash, before_hash=plan.before_hash, after_hash=plan.after_hash
    )
    return {"detail": f"{plan.path} now has hash {current_hash[:12]}", "condition": check.value}


def current_observation(
    entry: LedgerEntry, approval: ApprovalRequest | None
) -> dict[str, Any] | None:
    """The observation for a call as things stand now (for polling runtimes)."""
    context = _context(entry, entry.tool.name)
    record = entry.record
    if record is None:
        code = entry.observation_code
        return refusal(ObservationCode(code), context, next_action="stop") if code else None
    if approval is not None and approval.state == ApprovalRequest.State.REJECTED:
        return refusal(
            ObservationCode.APPROVAL_REJECTED,
            context,
            next_action="stop",
            detail=approval.decision_reason,
        )
    state = RecordState(record.state)
    if state is RecordState.SUCCEEDED:
        return success(record.result, context, replayed=entry.decision != Decision.EXECUTE)
    if state is RecordState.FAILED_FINAL:
        error = record.error or {}
        return refusal(
            ObservationCode.FAILED,
            context,
            next_action="stop",
            detail=str(error.get("message") or error.get("code")),
            retryable=record.error_retryable,
            error_code=str(error.get("code") or "FAILED"),
        )
    # A replay waiting for its human is answered by the approval below, not by the record's
    # (still unknown) state: the model must hear "approval pending", not "look it up".
    awaiting_approval = (
        entry.decision == Decision.APPROVAL_REQUIRED
        and approval is not None
        and approval.state in ApprovalRequest.OPEN_STATES
    )
    if state is RecordState.UNKNOWN and not awaiting_approval:
        recovery = recovery_decision(
            replay_policy=ReplayPolicy(entry.replay_policy),
            uncertain=True,
            error_code=None,
            error_final=False,
        )
        return refusal(
            ObservationCode.SIDE_EFFECT_UNCERTAIN,
            context,
            next_action=recovery.action.value,
            retryable=recovery.retryable,
        )
    if entry.status == EntryStatus.STARTED:
        return None  # this call holds the lease: go ahead
    if approval is not None and approval.state == ApprovalRequest.State.APPROVED:
        return refusal(
            ObservationCode.APPROVAL_REQUIRED,
            context,
            next_action="start",
            extra={"approval_id": approval.pk, "approved": True},
        )
    if entry.decision == Decision.APPROVAL_REQUIRED:
        return refusal(
            ObservationCode.APPROVAL_REQUIRED,
            context,
            next_action="await_approval",
            extra={"approval_id": approval.pk} if approval else {},
        )
    return refusal(ObservationCode.IN_PROGRESS, context, next_action="wait")


def call_status(*, caller: Caller, call_id: str) -> tuple[LedgerEntry, ApprovalRequest | None]:
    """A call's entry with its record and the latest approval of that record."""
    entry = _entry_for(caller, call_id)
    approval = None
    if entry.record is not None:
        approval = ApprovalRequest.objects.filter(record=entry.record).order_by("-pk").first()
    return entry, approval


def record_by_key(*, caller: Caller, key: str) -> IdempotencyRecord:
    record = IdempotencyRecord.objects.filter(tenant=caller.tenant, key=key).first()
    if record is None:
        raise NotFound("no record for that idempotency key")
    return record
