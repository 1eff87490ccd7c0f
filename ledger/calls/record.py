"""Recording a call before it runs (DESIGN sections 3-5): ``record_call`` is the hot path.

It classifies the call, builds the key, fingerprints the input, reserves the key, writes the
ledger entry *before* the tool runs and returns the decision with its model-facing
observation.
"""

from __future__ import annotations

from typing import Any

from django.db import transaction

from ledger import records, shadow
from ledger.approval_policies import PolicySpec, asking_policy
from ledger.calls import entries
from ledger.calls.approval import ask_for_approval
from ledger.calls.observations import observation_for
from ledger.calls.selectors import run_and_tool
from ledger.calls.values import Caller, CallInput, CallResult, Lease, WritePlanInput
from ledger.classification import Classification
from ledger.classification.calls import classify_tool_call
from ledger.domain import Decision, Idempotency, KeyScope, ObservationCode
from ledger.errors import InvalidInput, InvalidWritePlan
from ledger.keys import (
    KeyBuildError,
    arguments_object,
    build_idempotency_key,
    business_object_from,
    fingerprint,
)
from ledger.models import (
    AuditEvent,
    IdempotencyRecord,
    LedgerEntry,
    Run,
    Tenant,
    Tool,
    WorkspaceRoot,
    WritePlan,
)
from ledger.paths import workspace_path_problem
from ledger.redaction import redact_for_column, redact_text
from ledger.services.registry import ensure_catalogue_tool, validate_tool_name


def _tool(tenant: Tenant, name: str, actor: str) -> Tool:
    """The tool a call names that was not found registered: registered since, or a catalogue
    tool registered by its first use."""
    validate_tool_name(name)
    tool = Tool.objects.filter(tenant=tenant, name=name).first()
    return tool or ensure_catalogue_tool(tenant=tenant, name=name, actor=actor, source="api")


def _key(
    tenant: Tenant, run: Run, tool: Tool, request: CallInput, classification: Classification
) -> str:
    """The call's action (DESIGN section 3): the business object the runtime names, else the
    one its key fields name, else, for a call that is not a read, its arguments in its run
    (``keys.arguments_object``); a read is keyed by its step."""
    try:
        scope = KeyScope(tool.key_scope)
        business_object = request.business_object_id or business_object_from(
            tool.key_fields, request.input
        )
        if business_object is None and classification.idempotency is not Idempotency.IDEMPOTENT:
            business_object, scope = arguments_object(request.input), KeyScope.RUN
        return build_idempotency_key(
            scope=shadow.key_scope(run, scope),
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
    run, registered, policies = run_and_tool(caller.tenant, request.run_id, request.tool)
    # A registered tool's call is made once, for the one-statement way and the general one.
    call = call_of(caller, run, registered, request) if registered is not None else None
    taken = False  # the one-statement way found the key taken
    if call is not None and takes_key_at_once(run, policies, request, call):
        fast = _first_call_of_key(call)
        if fast is not None:
            return fast
        taken = True
    # One transaction: a first use of a catalogue tool registers it, and an error anywhere
    # below (a bad key, say) must leave nothing behind.
    with transaction.atomic():
        if call is None:
            tool = _tool(caller.tenant, request.tool, caller.identity)
            call = call_of(caller, run, tool, request)
        tool, classification, key = call.tool, call.classification, call.key
        if run.halted:
            entry = entries.add(
                call,
                decision=Decision.FORBIDDEN,
                record=None,
                code=ObservationCode.RUN_HALTED,
            )
            observation = observation_for(entry, None, next_action="stop")
            entries.told(entry, observation)
            return CallResult(entry, Decision.FORBIDDEN, classification, observation)
        if shadow.dry_run_required(run, classification.idempotency):
            return _shadow_dry_run(call, request.write_plan)
        policy = _asking_policy(policies, run, request, classification)
        reservation = records.reserve_key(
            tenant=caller.tenant,
            tool=tool,
            key=key,
            fingerprint=call.input_hash,
            replay_policy=classification.replay_policy,
            data_classification=request.data_classification,
            lease_owner=caller.identity,
            actor=caller.identity,
            run=run,
            combination=run.combination,
            taken=taken,
            requires_approval=policy is not None,
        )
        record = reservation.record
        entry = entries.add(
            call,
            decision=reservation.decision,
            record=record,
            code=reservation.code.value if reservation.code else "",
            reused_record=not reservation.created,
        )
        if request.write_plan is not None and reservation.created:
            record.write_plan = _save_write_plan(caller.tenant, entry, request.write_plan)
        result = CallResult(entry, reservation.decision, classification)
        if reservation.decision is Decision.EXECUTE:
            result.lease = Lease(record.fencing_token, record.lease_expires_at)  # type: ignore[arg-type]
        elif reservation.decision is Decision.APPROVAL_REQUIRED:
            # The policy that asks is the one of the key's first call: its request says why.
            ask_for_approval(result, record, caller, policy if reservation.created else None)
        result.observation = observation_for(
            entry, result.approval, next_action=reservation.next_action
        )
        entries.told(entry, result.observation)
    return result


def _asking_policy(
    policies: list[PolicySpec], run: Run, request: CallInput, classification: Classification
) -> PolicySpec | None:
    """The tenant's policy that asks a human before this call first runs, if any."""
    return asking_policy(
        policies,
        idempotency=classification.idempotency,
        tool=request.tool,
        tool_input=request.input,
        write_path=request.write_plan.path if request.write_plan else None,
        combination_id=run.combination_id,
    )


def _shadow_dry_run(call: entries.NewCall, write_plan: WritePlanInput | None) -> CallResult:
    """A shadow run's side-effecting call: no reservation, nothing runs. Its entry (tool,
    classification, input fingerprint, the key it would have used) and its write plan (with
    the dry-run diff) are the evidence of the intended action (``ledger.shadow``)."""
    entry = entries.add(
        call, decision=Decision.SHADOW_DRY_RUN, record=None, code=ObservationCode.SHADOW_DRY_RUN
    )
    if write_plan is not None:
        _save_write_plan(call.caller.tenant, entry, write_plan)
    observation = observation_for(entry, None, next_action="continue")
    entries.told(entry, observation)
    return CallResult(entry, Decision.SHADOW_DRY_RUN, call.classification, observation)


def call_of(caller: Caller, run: Run, tool: Tool, request: CallInput) -> entries.NewCall:
    """The call as the ledger records it: classified (handed the tenant's workspace roots), its
    idempotency key built and its input fingerprinted (raises on a bad input or key)."""
    classification = classify_tool_call(tool, request.input, roots=WorkspaceRoot.paths_for(tool))
    key = _key(caller.tenant, run, tool, request, classification)
    input_hash = _fingerprint(request.input)
    return entries.new_call(caller, run, tool, request, input_hash, classification, key)


def takes_key_at_once(
    run: Run, policies: list[PolicySpec], request: CallInput, call: entries.NewCall
) -> bool:
    """Whether a registered tool's call may take its key in one statement, without a
    transaction: no write plan, a running run, no policy asking a human first and no shadow
    run keeping it from running."""
    if request.write_plan is not None or run.halted:
        return False
    if policies and _asking_policy(policies, run, request, call.classification):
        return False
    return not shadow.dry_run_required(run, call.classification.idempotency)


def first_call_rows(
    call: entries.NewCall,
) -> tuple[LedgerEntry, IdempotencyRecord, AuditEvent]:
    """What the first call of a key writes when it takes the key at once (unsaved): its entry,
    executing, and the record with its audit event (``records.executing_record``)."""
    caller = call.caller
    entry = entries.build(call, decision=Decision.EXECUTE, record=None)
    record, event = records.executing_record(
        tenant=caller.tenant,
        tool=call.tool,
        key=call.key,
        fingerprint=call.input_hash,
        replay_policy=call.classification.replay_policy,
        lease_owner=caller.identity,
        actor=caller.identity,
        run=call.run,
        entry=entry,
    )
    return entry, record, event


def executing(call: entries.NewCall, entry: LedgerEntry) -> CallResult:
    """The answer to the first call of a key, whose ``entry`` was saved with its record:
    execute, under the record's lease."""
    record = entry.record
    assert record is not None
    result = CallResult(entry, Decision.EXECUTE, call.classification)
    result.lease = Lease(record.fencing_token, record.lease_expires_at)  # type: ignore[arg-type]
    return result


def _first_call_of_key(call: entries.NewCall) -> CallResult | None:
    """The common case, a key used for the first time by a registered tool in a running run:
    the record, its audit event and the entry in one statement, without a transaction
    (``records.reserve_new_key``). A duplicate (the key taken) is answered from the record
    that statement read when it can be (``_duplicate_as_seen``). None when neither could be
    done (or the database cannot): the caller then takes the general way, which answers from
    the locked record."""
    entry, record, event = first_call_rows(call)
    first = records.reserve_new_key(record, event, entry)
    if first.created is not None:
        return executing(call, entry)
    if first.seen is None:
        return None
    return _duplicate_as_seen(first.seen, first.seen_lapsed, call)


def _duplicate_as_seen(
    seen: IdempotencyRecord, lapsed: bool, call: entries.NewCall
) -> CallResult | None:
    """A duplicate answered from its record as read, without a lock or a transaction: the
    retry storm's ``wait`` and ``recorded_result``, counted and entered in one statement that
    checks the record has not changed since (``records.count_duplicate_as_seen``). None for
    an answer that needs the record's lock, or when the record changed in between."""
    reservation = records.answer_as_seen(
        seen,
        fingerprint=call.input_hash,
        replay_policy=call.classification.replay_policy,
        lapsed=lapsed,
    )
    if reservation is None:
        return None
    entry = entries.build(
        call,
        decision=reservation.decision,
        record=seen,
        code=reservation.code.value if reservation.code else "",
        reused_record=True,
    )
    # Told before the entry is inserted, so it is kept at no statement of its own.
    entries.told(entry, observation_for(entry, None, next_action=reservation.next_action))
    if not records.count_duplicate_as_seen(seen, entry):
        return None
    result = CallResult(entry, reservation.decision, call.classification)
    result.observation = entry.observation
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


def _save_write_plan(tenant: Tenant, entry: LedgerEntry, plan: WritePlanInput) -> WritePlan:
    return WritePlan.objects.create(
        tenant=tenant,
        entry=entry,
        workspace=plan.workspace,
        path=plan.path,
        before_hash=plan.before_hash,
        after_hash=plan.after_hash,
        # Shown to approvers and on the call's page: a diff of a settings file holds secrets.
        diff=redact_text(plan.diff, limit=None),
        patch_ref=redact_for_column(
            plan.patch_ref, WritePlan._meta.get_field("patch_ref").max_length
        ),
    )
