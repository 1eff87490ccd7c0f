"""Compensating actions (docs/compensation.md): declared for a tool or one call, previewed,
requested, decided by a human, then run by a worker through the compensating tool's
compensation adapter, as a side effect of its own in the ledger: its own record (the original
key plus ``ledger.compensation.KEY_SUFFIX``), ledger entry and approval; the key passed
downstream; an unknown outcome looked up like any other record's, never sent again.

A run is compensated as a whole (a saga) by the same steps for each of its actions, newest
first, stopping at the first one that does not succeed.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import timedelta
from enum import StrEnum
from typing import Any

from django.core.exceptions import ValidationError
from django.db import models, transaction
from django.db.models import Count, Exists, OuterRef, Q, QuerySet
from django.db.models.functions import Now
from django.utils.translation import gettext_noop

from ledger.compensation import (
    KEY_SUFFIX,
    CompensationError,
    compensation_arguments,
    compensation_key,
    compensation_state,
    fill_url,
    shown_state,
    url_arguments,
    validate_arguments,
)
from ledger.domain import (
    Idempotency,
    RecordState,
)
from ledger.errors import InvalidInput, InvalidTransition, LedgerError, NotFound
from ledger.models import (
    ApprovalRequest,
    Compensation,
    DeclaredCompensation,
    IdempotencyRecord,
    LedgerEntry,
    Run,
    Tool,
)
from ledger.outbound import OutboundRefused, check_url
from ledger.services import approvals, runs
from ledger.services.audit import audit
from ledger.services.runs import RUN_ID_MAX
from ledger.stored_text import StoredText
from reconcile.models import CompensationAdapter, DownstreamAdapter

logger = logging.getLogger(__name__)


# --- declarations ---------------------------------------------------------------------------


_DECLARED = StoredText(gettext_noop("declared"))
_CHANGED = StoredText(gettext_noop("changed"))
NO_COMPENSATION = StoredText(gettext_noop("%(tool)s declares no compensation"))


def _compensating_tool(tool: Tool, name: str) -> Tool:
    found = Tool.objects.filter(tenant_id=tool.tenant_id, name=name).first()
    if found is None:
        raise NotFound(f"no tool {name!r}: register the compensating tool first")
    if found.pk == tool.pk:
        raise InvalidInput("a tool cannot compensate itself")
    return found


def declare_compensation(
    *,
    tool: Tool,
    compensating_tool: str,
    arguments: Any,
    actor: str,
    source: str,
    record: IdempotencyRecord | None = None,
) -> DeclaredCompensation:
    """Declare how ``tool``'s action is undone; with ``record``, for that one call only, which
    must not have finished yet (the runtime registers it before running the tool)."""
    try:
        mapping = validate_arguments(arguments)
    except CompensationError as exc:
        raise InvalidInput(str(exc)) from None
    target = _compensating_tool(tool, compensating_tool)
    if record is not None and record.state not in (RecordState.RESERVED, RecordState.EXECUTING):
        raise InvalidTransition(
            f"a call's compensation is registered before it completes; it is {record.state}"
        )
    owner: dict[str, Any] = {"record": record} if record is not None else {"tool": tool}
    with transaction.atomic():
        declared, created = DeclaredCompensation.objects.update_or_create(
            **owner,
            defaults={
                "tenant_id": tool.tenant_id,
                "compensating_tool": target,
                "arguments": mapping,
                "declared_by": actor,
            },
        )
        audit(
            tenant=tool.tenant_id,
            actor=actor,
            action="compensation.declared",
            target=record if record is not None else tool,
            source=source,
            after={"tool": tool.name, "compensating_tool": target.name, "arguments": mapping},
            detail=(_DECLARED if created else _CHANGED)(),
        )
    return declared


# --- set up from the console: the declaration and the adapters that run it -----------------


_UNGIVEN = StoredText(
    gettext_noop("the URL takes %(names)s, which the arguments do not give (they give %(given)s)")
)
_NO_KEY = StoredText(
    gettext_noop("the look-up URL needs {key}, where the compensation's idempotency key goes")
)
_NO_STATUSES = StoredText(gettext_noop("give at least one success status, such as 200"))
_NOT_A_STATUS = StoredText(gettext_noop("%(status)s is not an HTTP status (100 to 599)"))


class SetupRefused(InvalidInput):
    """A compensation set-up that cannot be saved: ``errors`` names each setting at fault."""

    def __init__(self, errors: dict[str, str]) -> None:
        super().__init__("; ".join(errors.values()))
        self.errors = errors


def set_up_compensation(
    *,
    tool: Tool,
    compensating_tool: str,
    arguments: Any,
    url_template: str,
    success_statuses: Any,
    lookup_url_template: str,
    actor: str,
    source: str,
) -> DeclaredCompensation:
    """Everything ``tool``'s compensation needs to run, set at once: the declaration (by
    ``declare_compensation``, the rule the API's declarations follow), the compensating tool's
    compensation adapter (the ``POST`` a worker sends and the statuses that mean done) and,
    with ``lookup_url_template``, its downstream adapter, which looks a compensation whose
    outcome is unknown up by key. Every URL passes the outbound allow-list, as when it is sent.
    All or nothing: a refusal (``SetupRefused``) names every setting at fault and writes
    nothing."""
    errors: dict[str, str] = {}
    mapping: dict[str, str] = {}
    try:
        mapping = validate_arguments(arguments)
    except CompensationError as exc:
        errors["arguments"] = str(exc)
    target: Tool | None = None
    try:
        target = _compensating_tool(tool, compensating_tool)
    except LedgerError as exc:
        errors["compensating_tool"] = exc.message
    ungiven = url_arguments(url_template) - set(mapping)
    if mapping and ungiven:
        errors["url_template"] = _UNGIVEN(
            names=", ".join(sorted(ungiven)), given=", ".join(sorted(mapping))
        )
    existing = CompensationAdapter.objects.filter(tool=target).first() if target else None
    adapter = existing or CompensationAdapter(tenant_id=tool.tenant_id, tool=target)
    lookup = _lookup_of(target) if target else None
    before = _adapters_of(existing, lookup) if existing else None
    adapter.url_template = url_template.strip()
    try:
        adapter.success_statuses = _statuses(success_statuses)
    except InvalidInput as exc:
        errors["success_statuses"] = exc.message
    _validate(adapter, {"url_template": "url_template"}, errors)
    if lookup_url_template.strip():
        lookup = lookup or DownstreamAdapter(tenant_id=tool.tenant_id, tool=target)
        lookup.kind = DownstreamAdapter.Kind.HTTP
        lookup.url_template = lookup_url_template.strip()
        lookup.found_statuses = lookup.found_statuses or [200]
        lookup.not_found_statuses = lookup.not_found_statuses or [404]
        if "{key}" not in lookup.url_template:
            errors["lookup_url_template"] = _NO_KEY()
        _validate(lookup, {"url_template": "lookup_url_template"}, errors)
    if errors or target is None:
        raise SetupRefused(errors)
    with transaction.atomic():
        declared = declare_compensation(
            tool=tool, compensating_tool=target.name, arguments=mapping, actor=actor, source=source
        )
        adapter.save()
        if lookup is not None:
            lookup.save()
        audit(
            tenant=tool.tenant_id,
            actor=actor,
            action="compensation.adapter_set",
            target=target,
            source=source,
            before=before,
            after=_adapters_of(adapter, lookup),
        )
    return declared


def _lookup_of(tool: Tool) -> DownstreamAdapter | None:
    return DownstreamAdapter.objects.filter(tool=tool).first()


def _adapters_of(adapter: CompensationAdapter, lookup: DownstreamAdapter | None) -> dict[str, Any]:
    """What the audit keeps of a compensating tool's adapters."""
    return {
        "tool": adapter.tool.name,
        "url_template": adapter.url_template,
        "success_statuses": adapter.success_statuses,
        "lookup_url_template": lookup.url_template if lookup is not None else None,
    }


def _statuses(value: Any) -> list[int]:
    if not isinstance(value, list) or not value:
        raise InvalidInput(_NO_STATUSES())
    for status in value:
        if isinstance(status, bool) or not isinstance(status, int) or not 100 <= status <= 599:
            raise InvalidInput(_NOT_A_STATUS(status=status))
    return sorted(set(value))


def _validate(adapter: models.Model, settings: dict[str, str], errors: dict[str, str]) -> None:
    """The model's own checks (its ``clean``: the outbound allow-list), each refusal kept in
    ``errors`` under the setting it comes from, unless that setting has one already."""
    try:
        adapter.clean_fields(exclude=["tenant", "tool"])
        adapter.clean()
    except ValidationError as exc:
        for field, messages in exc.message_dict.items():
            errors.setdefault(settings.get(field, field), " ".join(messages))


def _declarations(records: Sequence[IdempotencyRecord]) -> dict[int, DeclaredCompensation]:
    """Each action's declaration, by the action's id: the call's own, else its tool's."""
    found = DeclaredCompensation.objects.select_related("compensating_tool").filter(
        Q(record_id__in=[r.pk for r in records]) | Q(tool_id__in={r.tool_id for r in records})
    )
    own = {d.record_id: d for d in found if d.record_id is not None}
    by_tool = {d.tool_id: d for d in found if d.record_id is None}
    return {
        r.pk: declared
        for r in records
        if (declared := own.get(r.pk) or by_tool.get(r.tool_id)) is not None
    }


def declaration_for(record: IdempotencyRecord) -> DeclaredCompensation | None:
    """The call's own declaration, else its tool's."""
    return _declarations([record]).get(record.pk)


# --- where a compensation is offered ---------------------------------------------------------


#: A read: an action classified idempotent when it ran, whose tool is still classified so. A
#: read changes nothing, so it needs no compensation (a tool a manager reclassified since, such
#: as a "read" that turned out to create orders, has its past actions offered again).
_A_READ = Q(classified_as=Idempotency.IDEMPOTENT, tool__idempotency=Idempotency.IDEMPOTENT)


def is_a_read(record: IdempotencyRecord) -> bool:
    """``_A_READ`` for one action (its tool read)."""
    return (
        record.classified_as == Idempotency.IDEMPOTENT
        and record.tool.idempotency == Idempotency.IDEMPOTENT
    )


def _can_be_requested() -> Q:
    """The actions a human can ask to compensate (rows of ``IdempotencyRecord``): succeeded,
    not a read, not a compensation, and declared (the call's own declaration, else its tool's)
    with a compensating tool that has an adapter to run it. Whether its arguments can be taken
    from what the ledger stored is for its page to say (``preview``): that reads the action's
    input and checks the URL, too much for every row of a list."""
    runnable = Exists(CompensationAdapter.objects.filter(tool_id=OuterRef("compensating_tool_id")))
    own = DeclaredCompensation.objects.filter(record_id=OuterRef("pk"))
    of_tool = DeclaredCompensation.objects.filter(tool_id=OuterRef("tool_id"))
    declared = Exists(own.filter(runnable)) | (~Exists(own) & Exists(of_tool.filter(runnable)))
    return Q(state=RecordState.SUCCEEDED) & ~_A_READ & ~_a_compensation() & Q(declared)


def _a_compensation() -> Q:
    """A compensation's own record (it is not compensated in turn)."""
    compensates = Compensation.objects.filter(tenant_id=OuterRef("tenant_id"), key=OuterRef("key"))
    return Q(Exists(compensates))


def _offered() -> Q:
    """Actions whose page offers a compensation: one requested already (its state shown), or
    one a human can ask for."""
    return Q(Exists(Compensation.objects.filter(original_id=OuterRef("pk")))) | _can_be_requested()


def offered(record_ids: Iterable[int]) -> set[int]:
    """Of these actions, the ids of those whose page offers a compensation. One statement."""
    ids = set(record_ids)
    if not ids:
        return set()
    return set(
        IdempotencyRecord.objects.filter(pk__in=ids).filter(_offered()).values_list("pk", flat=True)
    )


class RunOffer(StrEnum):
    """What a run's page says of compensating it."""

    SAGA = "saga"  # one of its actions can be compensated, or is: a link to the saga
    NONE = "none"  # actions that were not reads happened, none can be: why, once
    NOTHING = ""  # nothing happened that a compensation could undo: nothing to say


def run_offer(run: Run) -> RunOffer:
    """What ``run``'s page offers (``RunOffer``), read in one statement. The saga takes the
    run's non-idempotent actions (``_run_actions``), and so does its link."""
    happened = IdempotencyRecord.objects.filter(
        tenant_id=run.tenant_id, run=run, state=RecordState.SUCCEEDED
    ).exclude(_A_READ | _a_compensation())
    found = happened.aggregate(
        saga=Count("pk", filter=Q(classified_as=Idempotency.NON_IDEMPOTENT) & _offered()),
        happened=Count("pk"),
    )
    if found["saga"]:
        return RunOffer.SAGA
    return RunOffer.NONE if found["happened"] else RunOffer.NOTHING


# --- preview and request --------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Preview:
    """The exact call a compensation makes."""

    original: IdempotencyRecord
    tool: Tool
    arguments: dict[str, Any]
    key: str
    url: str

    def as_dict(self) -> dict[str, Any]:
        return {
            "original_key": self.original.key,
            "tool": self.tool.name,
            "arguments": self.arguments,
            "idempotency_key": self.key,
            "url": self.url,
        }

    @classmethod
    def of(cls, compensation: Compensation) -> Preview:
        """The call a requested compensation makes (as it was requested)."""
        return cls(
            compensation.original,
            compensation.tool,
            compensation.arguments,
            compensation.key,
            compensation.url,
        )


def is_compensation(record: IdempotencyRecord) -> bool:
    return Compensation.objects.filter(tenant_id=record.tenant_id, key=record.key).exists()


def first_entry(record: IdempotencyRecord) -> LedgerEntry:
    """The action's first ledger entry: its compensation takes its input and run from it."""
    entry = LedgerEntry.objects.select_related("run").filter(record=record).order_by("pk").first()
    if entry is None:
        raise InvalidTransition(NO_ENTRY)
    return entry


NO_ENTRY = "the action has no ledger entry to take its input from"


@dataclass(frozen=True, slots=True)
class _Sources:
    """What building the compensations of some actions reads, read once for all of them."""

    declarations: dict[int, DeclaredCompensation]  # by the action's id
    adapters: dict[int, CompensationAdapter]  # by the compensating tool's id
    inputs: dict[int, Any]  # the input of the action's first_entry, by the action's id


def _sources(records: Sequence[IdempotencyRecord]) -> _Sources:
    declarations = _declarations(records)
    adapters: dict[int, CompensationAdapter] = {}
    for adapter in CompensationAdapter.objects.filter(
        tool_id__in={d.compensating_tool_id for d in declarations.values()}
    ).order_by("pk"):
        adapters.setdefault(adapter.tool_id, adapter)
    inputs = dict(
        LedgerEntry.objects.filter(record_id__in=[r.pk for r in records])
        .order_by("record_id", "pk")
        .distinct("record_id")
        .values_list("record_id", "input")
    )
    return _Sources(declarations, adapters, inputs)


def _build(record: IdempotencyRecord, sources: _Sources) -> Preview:
    """The compensation of a succeeded action that has none yet. Raises when there is none to
    make."""
    if record.state != RecordState.SUCCEEDED:
        raise InvalidTransition(
            f"only an action that happened (succeeded) can be compensated; it is {record.state}"
        )
    declared = sources.declarations.get(record.pk)
    if declared is None:
        raise InvalidInput(NO_COMPENSATION(tool=record.tool.name))
    tool = declared.compensating_tool
    adapter = sources.adapters.get(tool.pk)
    if adapter is None:
        raise InvalidInput(f"{tool.name} has no compensation adapter to run it")
    if record.pk not in sources.inputs:
        raise InvalidTransition(NO_ENTRY)
    try:
        arguments = compensation_arguments(
            declared.arguments, tool_input=sources.inputs[record.pk], result=record.result
        )
        key = compensation_key(record.key)
        url = fill_url(adapter.url_template, arguments)
        check_url(url)
    except (CompensationError, OutboundRefused) as exc:
        raise InvalidInput(str(exc)) from None
    return Preview(record, tool, arguments, key, url)


def preview(*, record: IdempotencyRecord) -> Preview:
    """The compensation of a succeeded action, built now (or as it was requested). Raises,
    writing nothing, when there is none to make."""
    existing = (
        Compensation.objects.select_related("original", "tool").filter(original=record).first()
    )
    if existing is not None:
        return Preview.of(existing)
    if is_compensation(record):
        raise InvalidInput("a compensation is not compensated in turn")
    return _build(record, _sources([record]))


def compensation_run(original_run: Run, *, actor: str, source: str) -> Run:
    """The run a run's compensations are entered in, started (and audited) by the first
    request: a human's clean-up, under no version combination, so that halting or rolling back
    the original's combination (which halts the original run and voids its approvals) never
    blocks undoing what it did."""
    run, _created = runs.start_run(
        tenant=original_run.tenant,
        user_id=original_run.user_id,
        actor=actor,
        run_id=f"{original_run.run_id}{KEY_SUFFIX}"[:RUN_ID_MAX],
        uncombined=True,
        source=source,
    )
    return run


# --- the human decision ---------------------------------------------------------------------


def _approvals_of(compensations: Iterable[Compensation]) -> QuerySet[ApprovalRequest]:
    """The approval requests of the compensations' own records, in one query."""
    of_records = Q()
    for compensation in compensations:
        of_records |= Q(tenant_id=compensation.tenant_id, record__key=compensation.key)
    if not of_records:
        return ApprovalRequest.objects.none()
    return ApprovalRequest.objects.select_related("record").filter(of_records)


def open_approvals(compensations: Iterable[Compensation]) -> list[ApprovalRequest]:
    """The open approval of each compensation that has one, read at once."""
    latest: dict[int, ApprovalRequest] = {}
    for approval in (
        _approvals_of(compensations).filter(state__in=ApprovalRequest.OPEN_STATES).order_by("-pk")
    ):
        latest.setdefault(approval.record_id, approval)
    return list(latest.values())


def waiting_approvals(compensations: Iterable[Compensation]) -> list[ApprovalRequest]:
    """The compensations' approvals a human can still give (``approvals.still_open``)."""
    return list(approvals.still_open(_approvals_of(compensations)).order_by("pk"))


def shown_states(compensations: Sequence[Compensation]) -> dict[int, str]:
    """What the console shows of each compensation, by its id (``shown_state``: its own
    record's state read with its latest approval request's). Two statements for any number."""
    records = dict(
        IdempotencyRecord.objects.filter(
            tenant_id__in={c.tenant_id for c in compensations},
            key__in=[c.key for c in compensations],
        ).values_list("key", "state")
    )
    latest: dict[str, str] = {}
    for key, state in (
        _approvals_of(compensations).order_by("-pk").values_list("record__key", "state")
    ):
        latest.setdefault(key, state)
    return {c.pk: shown_state(records.get(c.key), latest.get(c.key)) for c in compensations}


def pending_approval(compensation: Compensation) -> ApprovalRequest | None:
    return next(iter(open_approvals([compensation])), None)


def compensation_of_approval(approval: ApprovalRequest) -> Compensation | None:
    """The compensation an approval request is about, if it is one."""
    return (
        Compensation.objects.select_related("original")
        .filter(tenant_id=approval.tenant_id, key=approval.record.key)
        .first()
    )


# --- a run as a whole (saga) ---------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SagaStep:
    """One action of a run, newest first: its compensation (requested or previewed), or why
    it has none."""

    original: IdempotencyRecord
    state: str  # ``compensated``, the compensation record's state, ``planned``, or ``none``
    compensation: Compensation | None = None
    preview: Preview | None = None
    problem: str = ""

    @property
    def call(self) -> Preview | None:
        """The call the step makes: as requested, else as planned."""
        return Preview.of(self.compensation) if self.compensation is not None else self.preview


def _run_actions(run: Run) -> list[IdempotencyRecord]:
    """The run's succeeded non-idempotent actions, newest first, compensations left out."""
    keys = Compensation.objects.filter(tenant_id=run.tenant_id).values("key")
    return list(
        IdempotencyRecord.objects.select_related("tool")
        .filter(
            tenant_id=run.tenant_id,
            run=run,
            state=RecordState.SUCCEEDED,
            classified_as=Idempotency.NON_IDEMPOTENT,
        )
        .exclude(key__in=keys)
        .order_by("-created_at", "-pk")
    )


def saga_plan(run: Run) -> list[SagaStep]:
    """What compensating ``run`` as a whole does, in the order it would do it. Reads the same
    statements however many actions the run has."""
    existing = {
        c.original_id: c
        for c in Compensation.objects.select_related("original", "tool").filter(run=run)
    }
    record_states = dict(
        IdempotencyRecord.objects.filter(
            tenant_id=run.tenant_id, key__in=[c.key for c in existing.values()]
        ).values_list("key", "state")
    )
    actions = _run_actions(run)
    sources = _sources([r for r in actions if r.pk not in existing])
    steps = []
    for record in actions:
        if (compensation := existing.get(record.pk)) is not None:
            state = compensation_state(record_states.get(compensation.key))
            steps.append(SagaStep(record, state, compensation=compensation))
            continue
        try:
            steps.append(SagaStep(record, "planned", preview=_build(record, sources)))
        except (InvalidInput, InvalidTransition) as exc:
            steps.append(SagaStep(record, "none", problem=exc.message))
    return steps


def saga_compensations(run: Run) -> list[Compensation]:
    """The run's compensations in saga order (newest original first)."""
    return list(
        Compensation.objects.select_related("original", "tool")
        .filter(run=run)
        .order_by("-original__created_at", "-original__pk")
    )


def _before_in_saga() -> Q:
    """The compensations of the outer one's run that come before it in saga order (the order
    of ``saga_compensations``: the newer original first)."""
    created = OuterRef("original__created_at")
    return Q(run_id=OuterRef("run_id")) & (
        Q(original__created_at__gt=created)
        | Q(original__created_at=created, original_id__gt=OuterRef("original_id"))
    )


def unsent_sagas(*, grace_seconds: int, limit: int) -> list[int]:
    """The runs (at most ``limit``, by id) whose saga is due and was never sent, or whose
    message was lost: the first of the run's compensations, in saga order, that has not
    succeeded waits to start with an approval granted more than ``grace_seconds`` ago by the
    database's clock (its commit's own send has had time to arrive) and not used yet. A saga
    that stopped is not among them: the step it stopped at started, its approval is used, and
    the approved steps after it wait for a human to go on. One statement, whatever the number
    of compensations; ``limit`` counts only runs that are due."""
    granted = ApprovalRequest.objects.filter(
        tenant_id=OuterRef("tenant_id"),
        record__key=OuterRef("key"),
        state=ApprovalRequest.State.APPROVED,
        decided_at__lte=Now() - timedelta(seconds=grace_seconds),
    ).filter(
        # Waiting to start (``lifecycle.start_approved``); an unknown one is looked up instead.
        IdempotencyRecord.waits_to_start_q("record__") & ~Q(record__state=RecordState.UNKNOWN)
    )
    succeeded = IdempotencyRecord.objects.filter(
        tenant_id=OuterRef("tenant_id"), key=OuterRef("key"), state=RecordState.SUCCEEDED
    )
    unfinished_before = Compensation.objects.filter(_before_in_saga()).exclude(Exists(succeeded))
    return list(
        Compensation.objects.filter(Exists(granted), run__isnull=False)
        .exclude(Exists(unfinished_before))
        .order_by("pk")
        .values_list("run_id", flat=True)[:limit]
    )
