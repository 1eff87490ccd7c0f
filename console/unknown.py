"""Calls whose outcome is unknown: the queue, one call's timeline, and the actions on it, one
at a time or in bulk.

A bulk action works on a frozen selection: the ids the operator ticked, carried through a
dry-run summary to the confirmation. Nothing that appears later joins it, and a call that was
settled in the meantime (by a look-up, say) is skipped and reported, never changed again.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from django import forms
from django.contrib import messages
from django.http import HttpRequest, HttpResponse, QueryDict
from django.http.response import HttpResponseBase
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from console import selectors, states
from console.access import console_view, get_for_tenant, missing_ids
from console.csv_export import Columns, csv_response, export_href
from console.filters import RANGES
from console.navigation import context_for
from console.params import parse_id
from ledger.clock import db_now
from ledger.domain import EscalationKind, RecordState, not_executed
from ledger.errors import InvalidInput, LedgerError
from ledger.models import IdempotencyRecord, Tenant
from ledger.permissions import Role
from ledger.records import Outcome, not_landed, resolve_unknown
from reconcile import operator_actions

#: Calls per page of the queue; a bulk action takes at most one page's worth.
PAGE = 100
MAX_BULK = PAGE

#: Actions allowed in bulk. Marking succeeded needs evidence about each call, so it is not.
BULK_ACTIONS = {
    "lookup": gettext_lazy("Look up downstream now"),
    "failed": gettext_lazy("Mark did not happen"),
    "escalate": gettext_lazy("Escalate to a human"),
}


def _get_unknown_for_user(request: HttpRequest, tenant: Tenant, pk: int) -> IdempotencyRecord:
    records = IdempotencyRecord.objects.select_related("tool", "combination", "run")
    return get_for_tenant(request, tenant, records, pk, "No such call.")


def apply_action(record: IdempotencyRecord, action: str, note: str, actor: str) -> str:
    """Do one operator action on one unknown call; returns what happened, for the operator.
    Raises ``LedgerError`` (nothing changed) when the action is not possible."""
    if action == "lookup":
        operator_actions.request_lookup(record=record, actor=actor)
        return _("A look-up was queued.")
    if action == "succeeded":
        if not note:
            raise InvalidInput(_("Marking a call succeeded needs evidence."))
        resolve_unknown(
            record=record,
            outcome=Outcome.SUCCEEDED,
            actor=actor,
            source="console",
            detail=note,
            result={"evidence": note, "resolved_by": actor},
        )
        return _("Marked succeeded; duplicates now get this result.")
    if action == "failed":
        if not note:
            raise InvalidInput(_("Say how you know it did not happen."))
        resolve_unknown(
            record=record,
            outcome=Outcome.FAILED,
            actor=actor,
            source="console",
            detail=note,
            error=not_executed(note),
        )
        return _("Marked as not happened; a retry with the same key may run it.")
    if action == "escalate":
        operator_actions.escalate(record=record, actor=actor, reason=note)
        return _("Escalated.")
    raise InvalidInput(_("Unknown action."))


def likely_resolution(record: IdempotencyRecord) -> str:
    """The resolve action the evidence points to, the page's default button: "failed" where a
    file check found the write did not land; none for a write conflict (a human decides from
    the file as it is now); else "succeeded"."""
    if not_landed(record):
        return "failed"
    if record.escalation_kind == EscalationKind.WRITE_CONFLICT:
        return ""
    return "succeeded"


#: Why a call was escalated to a human, for each ``EscalationKind``, as the queue says it.
ESCALATION_KINDS = {
    EscalationKind.WRITE_CONFLICT: gettext_lazy("write conflict"),
    EscalationKind.WRITE_NOT_LANDED: gettext_lazy("write did not land"),
    EscalationKind.NO_CHECK: gettext_lazy("cannot be looked up"),
    EscalationKind.LOOKUPS_EXHAUSTED: gettext_lazy("look-ups ran out"),
    EscalationKind.OPERATOR: gettext_lazy("escalated by an operator"),
    EscalationKind.CONTRADICTED_SETTLEMENT: gettext_lazy("contradicts its settlement"),
}
#: The longest input the queue shows in a row (compact JSON); a longer one is on the call's page.
INPUT_SUMMARY_MAX = 160


def _compact(value: object) -> str:
    return json.dumps(value, ensure_ascii=False, sort_keys=True, separators=(",", ":"))


def input_summary(value: object) -> str:
    """A call's (redacted) input as compact JSON if it is short, else empty."""
    if value is None:
        return ""
    text = _compact(value)
    return text if len(text) <= INPUT_SUMMARY_MAX else ""


def escalation_label(record: IdempotencyRecord) -> str:
    """Why the call waits for a human, or empty while it is looked up automatically."""
    if not record.escalated:
        return ""
    kind = (
        ESCALATION_KINDS.get(EscalationKind(record.escalation_kind))
        if record.escalation_kind
        else None
    )
    return str(kind or _("needs a human"))


class UnknownFilter(forms.Form):
    """The queue's filters, all in the URL (a filtered queue can be shared)."""

    tool = forms.CharField(label=gettext_lazy("Tool"), required=False, max_length=200)
    kind = forms.ChoiceField(
        label=gettext_lazy("Kind"),
        required=False,
        choices=[
            ("", gettext_lazy("any")),
            ("escalated", gettext_lazy("needs a human (any reason)")),
            *((kind.value, label) for kind, label in ESCALATION_KINDS.items()),
            ("automatic", gettext_lazy("being looked up")),
        ],
    )
    combination = forms.TypedChoiceField(
        label=gettext_lazy("Combination"), required=False, coerce=int
    )
    older_than = forms.ChoiceField(
        label=gettext_lazy("Unknown for over"),
        required=False,
        choices=[("", gettext_lazy("any time"))] + [(age, age) for age in RANGES],
    )

    def __init__(self, data: QueryDict, *, tenant: Tenant) -> None:
        super().__init__(data)
        combination = self.fields["combination"]
        assert isinstance(combination, forms.TypedChoiceField)
        combination.choices = selectors.combination_choices(tenant)


@console_view(Role.OPERATOR, export=True)
def unknown_calls(request: HttpRequest, tenant: Tenant) -> HttpResponseBase:
    """The queue, oldest first, filtered, in keyset pages (``after=<id of the last call
    shown>``)."""
    return _queue(request, tenant, request.GET)


@dataclass(frozen=True)
class QueueRow:
    """An unknown call as the queue shows it: why it waits for a human (empty while it is
    looked up automatically), what happens next and who does it, and its input if short."""

    record: IdempotencyRecord
    escalation: str
    step: states.NextStep
    input: str


#: The columns of the queue's CSV export: the page's, in its order (the whole input).
UNKNOWN_COLUMNS: Columns = [
    ("unknown_since", lambda r: r.uncertain_since.isoformat() if r.uncertain_since else ""),
    ("tool", lambda r: r.tool.name),
    ("idempotency_key", lambda r: r.key),
    ("input", lambda r: "" if r.first_input is None else _compact(r.first_input)),
    ("combination", lambda r: r.combination.label if r.combination else ""),
    ("lookups", lambda r: r.reconcile_attempts),
    ("escalation", lambda r: (r.escalation_kind or "escalated") if r.escalated else ""),
    ("escalation_reason", lambda r: r.escalation_reason if r.escalated else ""),
    ("record_id", lambda r: r.pk),
]


@dataclass(frozen=True)
class BulkForm:
    """A bulk action the operator asked for that could not be reviewed, shown again on the
    queue with the reason and what they ticked, chose and typed."""

    error: str
    ticked: set[int]
    action: str
    note: str


def _queue(
    request: HttpRequest, tenant: Tenant, params: QueryDict, bulk: BulkForm | None = None
) -> HttpResponseBase:
    form = UnknownFilter(params, tenant=tenant)
    after = params.get("after", "")
    after_id = parse_id(after)
    query = params.copy()
    query.pop("after", None)
    query.pop("format", None)
    if not form.is_valid():
        records: list[IdempotencyRecord] | None = []
    else:
        data = form.cleaned_data
        filters = {
            "tool": data["tool"].strip(),
            "kind": data["kind"],
            "combination": data["combination"] if data["combination"] != "" else None,
            "older_than": RANGES.get(data["older_than"]),
        }
        if params.get("format") == "csv" and bulk is None:
            every = selectors.all_unknown_calls(tenant, **filters)
            return csv_response(f"{tenant.slug}-unknown.csv", UNKNOWN_COLUMNS, every)
        records = selectors.unknown_calls(tenant, limit=PAGE + 1, after=after_id, **filters)
    if records is None or (after and after_id is None):
        messages.info(request, _("That call is no longer unknown; the queue starts again."))
        return redirect(f"{reverse('console:unknown_calls')}?{query.urlencode()}")
    reconciler, now = selectors.reconciler(), db_now()
    return render(
        request,
        "console/unknown.html",
        context_for(
            request,
            tenant,
            form=form,
            query=query.urlencode(),
            records=records[:PAGE],
            rows=[
                QueueRow(
                    r,
                    escalation_label(r),
                    states.next_step(r, looking_up=reconciler.running, now=now),
                    input_summary(getattr(r, "first_input", None)),
                )
                for r in records[:PAGE]
            ],
            # The queue is also shown at /unknown/bulk (a bulk action's error): links go to it.
            export_href=reverse("console:unknown_calls") + export_href(query.urlencode())
            if form.is_valid()
            else None,
            next_after=records[PAGE - 1].pk if len(records) > PAGE else None,
            paged=bool(after),
            reconciler=reconciler,
            bulk_actions=BULK_ACTIONS,
            bulk=bulk,
        ),
        status=200 if form.is_valid() and bulk is None else 400,
    )


@console_view(Role.OPERATOR, target="idempotencyrecord")
def unknown_detail(request: HttpRequest, tenant: Tenant, pk: int) -> HttpResponse:
    record = _get_unknown_for_user(request, tenant, pk)
    page = selectors.record_page(record)
    attempts = page["attempts"]
    assert isinstance(attempts, list)
    queued = selectors.unknown_call(tenant, record.pk)
    step = (
        states.next_step(queued, looking_up=selectors.reconciler().running, now=db_now())
        if queued is not None
        else None
    )
    return render(
        request,
        "console/unknown_detail.html",
        context_for(
            request,
            tenant,
            record=record,
            escalated=states.escalated_now(record),
            step=step,
            likely=likely_resolution(record),
            file_now=selectors.file_now(attempts),
            **page,
        ),
    )


@console_view(Role.OPERATOR, methods=("POST",), target="idempotencyrecord")
def unknown_action(request: HttpRequest, tenant: Tenant, pk: int) -> HttpResponse:
    """Look up now, mark succeeded (evidence required), mark did-not-happen, or escalate;
    then on to the queue's next call, with a message naming the one acted on."""
    record = _get_unknown_for_user(request, tenant, pk)
    # The queue's next call, oldest first, read while this one still has its place in it.
    following = selectors.unknown_calls(tenant, limit=1, after=record.pk) or []
    try:
        done = apply_action(
            record,
            request.POST.get("action", ""),
            request.POST.get("note", "").strip(),
            request.user.get_username(),
        )
    except LedgerError as exc:
        messages.error(request, exc.message)
        return redirect("console:unknown_call", pk=record.pk)
    messages.success(request, f"{states.call_label(record)}: {done}")
    if following:  # on to the next call of the queue
        return redirect("console:unknown_call", pk=following[0].pk)
    return redirect("console:unknown_calls")


@dataclass(frozen=True)
class BulkItem:
    record: IdempotencyRecord
    ready: bool  # still unknown, so the action applies


def _selection(request: HttpRequest, tenant: Tenant) -> list[IdempotencyRecord]:
    """The ticked calls, in the order shown. Bad or foreign ids are an error for the whole
    request: nothing is changed when the selection is not exactly what the operator saw."""
    data = request.POST if request.method == "POST" else request.GET
    raw = data.getlist("ids")
    if not raw:
        raise InvalidInput(_("Select at least one call."))
    if len(raw) > MAX_BULK:
        raise InvalidInput(_("Select at most %(n)d calls at a time.") % {"n": MAX_BULK})
    parsed = [parse_id(value) for value in raw]
    if None in parsed:
        raise InvalidInput(_("The selection is malformed."))
    ids = list(dict.fromkeys(pk for pk in parsed if pk is not None))
    records = {
        r.pk: r
        for r in IdempotencyRecord.objects.filter(tenant=tenant, pk__in=ids).select_related("tool")
    }
    if len(records) != len(ids):
        missing_ids(request, tenant, IdempotencyRecord, [pk for pk in ids if pk not in records])
        raise InvalidInput(_("Some selected calls do not exist in this tenant."))
    return [records[pk] for pk in ids]


@console_view(Role.OPERATOR, methods=("GET", "POST"), export=False)
def unknown_bulk(request: HttpRequest, tenant: Tenant) -> HttpResponseBase:
    """GET: the dry-run summary of a bulk action on a frozen selection. POST: do it on exactly
    that selection, one call at a time (each audited), then report what was done and skipped."""
    data = request.POST if request.method == "POST" else request.GET
    action = data.get("action", "")
    note = data.get("note", "").strip()
    try:
        if action not in BULK_ACTIONS:
            raise InvalidInput(_("Choose an action."))
        if action in ("failed", "escalate") and not note:
            raise InvalidInput(_("This action needs a reason; it is kept with every call."))
        selection = _selection(request, tenant)
    except LedgerError as exc:
        if request.method == "GET":  # from the queue's form: back to it, as it was filled in
            ticked = {pk for pk in map(parse_id, data.getlist("ids")) if pk is not None}
            return _queue(request, tenant, QueryDict(), BulkForm(exc.message, ticked, action, note))
        messages.error(request, exc.message)
        return render(
            request,
            "console/unknown_bulk.html",
            context_for(request, tenant, items=[], action=action, note=note),
            status=400,
        )
    if request.method == "POST":
        actor = request.user.get_username()
        skipped = []
        for record in selection:
            try:
                apply_action(record, action, note, actor)
            except LedgerError as exc:
                skipped.append(f"{record.key}: {exc.message}")
        done = len(selection) - len(skipped)
        messages.success(
            request,
            _("%(action)s: done for %(done)d of %(total)d selected calls.")
            % {"action": BULK_ACTIONS[action], "done": done, "total": len(selection)},
        )
        for line in skipped:
            messages.warning(request, _("Skipped %(why)s") % {"why": line})
        return redirect("console:unknown_calls")
    items = [BulkItem(r, ready=r.state == RecordState.UNKNOWN) for r in selection]
    return render(
        request,
        "console/unknown_bulk.html",
        context_for(
            request,
            tenant,
            items=items,
            action=action,
            action_label=BULK_ACTIONS[action],
            note=note,
            ready=sum(1 for item in items if item.ready),
        ),
    )
