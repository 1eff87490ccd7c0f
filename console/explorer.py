"""The ledger explorer: calls and runs, searchable, keyset-paged; a run's timeline.

Pages are keyset-paged (``before=<pk>`` of the last row shown), newest first: calls on
(created_at, id), in the order of their index ``(tenant, created_at, id)``, so a time window
reads its own rows from the index and not every newer call; runs on the primary key. A page
costs the same at the millionth row as at the first, and the query count is the same for any
page size. The page's ids are found first (filters and order only), then only those rows are
read with what they show, so a search matching thousands joins fifty.
Filters are a Django form: bad input is shown as an error and the list is not queried. Every
filter is in the URL, so a filtered list can be shared; ``format=csv`` is every row the filters
match, as CSV (``console.csv_export``).

Search: run ids and call ids by prefix, keys (and so the business objects they end with) and
tool names by fragment, a key's start (a text that begins as every key does) by prefix. The
indexes behind them: ``ledger`` migrations ``0013_search_trigram`` (the trigram one only where
the server has pg_trgm) and ``0018_entry_key_prefix_index``.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable
from typing import Any

from django import forms
from django.db.models import Q, QuerySet, Subquery
from django.http import Http404, HttpRequest, HttpResponse
from django.http.response import HttpResponseBase
from django.shortcuts import redirect, render
from django.utils.translation import gettext_lazy as _

from console import selectors
from console.access import console_view, get_for_tenant, get_for_tenant_by
from console.csv_export import Columns, csv_response, export_href
from console.filters import TimeRangeForm, tool_matches
from console.navigation import context_for
from console.params import parse_id
from console.templatetags.target_links import object_url
from ledger.domain import Decision, EntryStatus
from ledger.keys import KEY_START
from ledger.models import LedgerEntry, Run, Tenant
from ledger.permissions import Role
from reconcile import compensations

DEFAULT_PAGE_SIZE = 50
MAX_PAGE_SIZE = 200
TIMELINE_PAGE = 100
# What the timeline shows of a call: only these are read (an entry, its record and its tool
# have over 60 columns, JSON among them; building them all would be most of the page's time).
TIMELINE_FIELDS = (
    "call_id",
    "step_id",
    "created_at",
    "decision",
    "observation_code",
    "reused_record",
    "status",
    "idempotency",
    "replay_policy",
    "idempotency_key",
    "tool__name",
    "record__state",
)
#: What the calls list (and its CSV) shows of a call: only these are read, for the same reason.
CALL_LIST_FIELDS = (
    "call_id",
    "created_at",
    "decision",
    "observation_code",
    "reused_record",
    "status",
    "idempotency_key",
    "record",
    "run__run_id",
    "tool__name",
    "combination__label",
)
#: A key fragment shorter than a trigram cannot use the trigram index.
MIN_FRAGMENT = 3


def _hint(text: Any) -> forms.TextInput:
    return forms.TextInput(attrs={"placeholder": text})


def _blank_choice(values: list[str]) -> list[tuple[str, Any]]:
    return [("", _("any"))] + [(v, v.replace("_", " ")) for v in values]


class _PagedFilter(TimeRangeForm):
    """Common to both lists: the combination, a time window and the keyset cursor."""

    combination = forms.TypedChoiceField(label=_("Combination"), required=False, coerce=int)
    before = forms.IntegerField(required=False, min_value=1, widget=forms.HiddenInput)
    size = forms.IntegerField(
        label=_("Per page"), required=False, min_value=1, max_value=MAX_PAGE_SIZE
    )

    def __init__(self, data: Any, *, tenant: Tenant) -> None:
        super().__init__(data)
        combination = self.fields["combination"]
        assert isinstance(combination, forms.TypedChoiceField)
        combination.choices = selectors.combination_choices(tenant)

    def page_size(self) -> int:
        return self.cleaned_data.get("size") or DEFAULT_PAGE_SIZE


class CallFilter(_PagedFilter):
    run = forms.CharField(
        label=_("Run id"), required=False, max_length=200, widget=_hint(_("or its start"))
    )
    call = forms.RegexField(
        label=_("Call id"),
        required=False,
        regex=r"^[0-9a-fA-F-]{1,36}$",
        max_length=36,
        error_messages={"invalid": _("A call id (or its start) is hexadecimal digits and -.")},
        widget=_hint(_("or its start")),
    )
    key = forms.CharField(
        label=_("Idempotency key"),
        required=False,
        min_length=MIN_FRAGMENT,
        max_length=1024,
        widget=_hint(_("any part, e.g. cart-42")),
    )
    tool = forms.CharField(label=_("Tool"), required=False, max_length=200)
    status = forms.ChoiceField(
        label=_("Status"), required=False, choices=_blank_choice([s.value for s in EntryStatus])
    )
    decision = forms.ChoiceField(
        label=_("Decision"), required=False, choices=_blank_choice([d.value for d in Decision])
    )
    field_order = ("run", "call", "key", "tool", "status", "decision", "combination", "range")

    def clean_call(self) -> str:
        return str(self.cleaned_data["call"]).lower()  # as PostgreSQL writes a uuid


class RunFilter(_PagedFilter):
    run = forms.CharField(
        label=_("Run id"), required=False, max_length=200, widget=_hint(_("or its start"))
    )
    status = forms.ChoiceField(
        label=_("Status"), required=False, choices=_blank_choice([s.value for s in Run.Status])
    )
    field_order = ("run", "status", "combination", "range")


def _page(
    shown: QuerySet[Any], rows: QuerySet[Any], form: _PagedFilter, time: str | None = None
) -> tuple[list[Any], int | None]:
    """One keyset page of ``rows`` (``shown``, filtered), newest first, by ``time`` then id (by
    id alone without ``time``), read as ``shown`` reads them; and the cursor of the next (older)
    page if any. With ``time``, a cursor that is not one of ``shown`` is a 404 (there is no
    time to continue from)."""
    before = form.cleaned_data.get("before")
    if before and time:
        at = shown.filter(pk=before).values_list(time, flat=True).first()
        if at is None:
            raise Http404("No such row in this list.")
        # The bound on time alone is what the index can seek to; the rest breaks ties.
        rows = rows.filter(Q(**{f"{time}__lt": at}) | Q(**{time: at, "pk__lt": before}))
        rows = rows.filter(**{f"{time}__lte": at})
    elif before:
        rows = rows.filter(pk__lt=before)
    order = (f"-{time}", "-pk") if time else ("-pk",)
    size = form.page_size()
    ids = rows.order_by(*order).values("pk")[: size + 1]
    page = list(shown.filter(pk__in=Subquery(ids)).order_by(*order))
    more = len(page) > size
    page = page[:size]
    return page, (page[-1].pk if more and page else None)


#: Each filter of the form and the lookup it applies (an empty filter applies none); the key's
#: is ``key_lookup``'s.
CALL_LOOKUPS = {
    "run": "run__run_id__startswith",
    "call": "call_id__startswith",
    "status": "status",
    "decision": "decision",
    "combination": "combination_id",
    "since": "created_at__gte",
    "until": "created_at__lt",
}
RUN_LOOKUPS = {
    "run": "run_id__startswith",
    "status": "status",
    "combination": "combination_id",
    "since": "started_at__gte",
    "until": "started_at__lt",
}


def _filtered(rows: QuerySet[Any], form: _PagedFilter, lookups: dict[str, str]) -> QuerySet[Any]:
    data = form.cleaned_data
    return rows.filter(
        **{lookup: data[name] for name, lookup in lookups.items() if data[name] not in (None, "")}
    )


def key_lookup(text: str) -> str:
    """How the key filter searches ``text``: a text that begins as every key does is a key's
    start, read from the B-tree ``entry_key_prefix_idx`` (the trigram index would read the
    posting lists of trigrams every key has); any other text is a fragment of the key."""
    if text.startswith(KEY_START):
        return "idempotency_key__startswith"
    return "idempotency_key__contains"


def _shown_calls(calls: QuerySet[LedgerEntry]) -> QuerySet[LedgerEntry]:
    return calls.select_related("run", "tool", "combination").only(*CALL_LIST_FIELDS)


def _matching_calls(tenant: Tenant, form: CallFilter) -> QuerySet[LedgerEntry]:
    rows = _filtered(LedgerEntry.objects.filter(tenant=tenant), form, CALL_LOOKUPS)
    rows = rows.filter(tool_matches(form.cleaned_data["tool"]))
    if key := form.cleaned_data["key"]:
        rows = rows.filter(**{key_lookup(key): key})
    return rows


def search_calls(tenant: Tenant, form: CallFilter) -> tuple[list[LedgerEntry], int | None]:
    shown = _shown_calls(LedgerEntry.objects.filter(tenant=tenant))
    return _page(shown, _matching_calls(tenant, form), form, time="created_at")


def export_calls(tenant: Tenant, form: CallFilter) -> QuerySet[LedgerEntry]:
    """Every call the filters match, in the page's order (newest first)."""
    return _shown_calls(_matching_calls(tenant, form)).order_by("-created_at", "-pk")


def search_runs(tenant: Tenant, form: RunFilter) -> tuple[list[Run], int | None]:
    runs = Run.objects.filter(tenant=tenant)
    return _page(runs.select_related("combination"), _filtered(runs, form, RUN_LOOKUPS), form)


def export_runs(tenant: Tenant, form: RunFilter) -> QuerySet[Run]:
    """Every run the filters match, in the page's order (newest first)."""
    runs = _filtered(Run.objects.filter(tenant=tenant), form, RUN_LOOKUPS)
    return runs.select_related("combination").order_by("-pk")


#: The columns of each list's CSV export: the page's columns, in its order.
CALL_COLUMNS: Columns = [
    ("when", lambda e: e.created_at.isoformat()),
    ("tool", lambda e: e.tool.name),
    ("run_id", lambda e: e.run.run_id),
    ("decision", lambda e: e.decision),
    ("observation_code", lambda e: e.observation_code),
    ("dedup_hit", lambda e: e.dedup_hit),
    ("status", lambda e: e.status),
    ("idempotency_key", lambda e: e.idempotency_key),
    ("combination", lambda e: e.combination.label if e.combination else ""),
    ("call_id", lambda e: e.call_id),
]
RUN_COLUMNS: Columns = [
    ("run_id", lambda r: r.run_id),
    ("started_at", lambda r: r.started_at.isoformat()),
    ("status", lambda r: r.status),
    ("termination_reason", lambda r: r.termination_reason),
    ("user_id", lambda r: r.user_id),
    ("combination", lambda r: r.combination.label if r.combination else ""),
]


#: A whole call id, as the API writes it (and PostgreSQL, once lower-cased by the filter).
WHOLE_CALL_ID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")


def exact_call(form: _PagedFilter, rows: list[Any]) -> str | None:
    """The page of the call a search names by its whole id (pasted from a log, say), when
    that call is the one row found: the search goes straight to it."""
    call = form.cleaned_data.get("call") or ""
    if WHOLE_CALL_ID.match(call) and len(rows) == 1 and str(rows[0].call_id) == call:
        return object_url("call", rows[0].pk)
    return None


def _list_page(
    request: HttpRequest,
    tenant: Tenant,
    form: _PagedFilter,
    template: str,
    search: Any,
    export: Any,
    columns: Columns,
    jump: Callable[[_PagedFilter, list[Any]], str | None] | None = None,
) -> HttpResponseBase:
    """The page of the list's rows its filters match, or with ``format=csv`` all of them;
    ``jump``: where a search that names one object by its whole id goes instead."""
    rows: list[Any] = []
    next_before = None
    if form.is_valid():
        if request.GET.get("format") == "csv":
            name = template.rsplit("/", 1)[-1].removesuffix(".html")
            return csv_response(f"{tenant.slug}-{name}.csv", columns, export(tenant, form))
        rows, next_before = search(tenant, form)
        target = jump(form, rows) if jump is not None else None
        if target is not None:
            return redirect(target)
    query = form.query_without_cursor()
    return render(
        request,
        template,
        context_for(
            request,
            tenant,
            form=form,
            rows=rows,
            next_before=next_before,
            query=query,
            export_href=export_href(query) if form.is_valid() else None,
            paged=bool(form.data.get("before")),
        ),
        status=200 if form.is_valid() else 400,
    )


@console_view(Role.OPERATOR, Role.APPROVER, Role.MANAGER, export=True)
def calls(request: HttpRequest, tenant: Tenant) -> HttpResponseBase:
    form = CallFilter(request.GET, tenant=tenant)
    template = "console/explorer_calls.html"
    return _list_page(
        request,
        tenant,
        form,
        template,
        search_calls,
        export_calls,
        CALL_COLUMNS,
        jump=exact_call,
    )


@console_view(Role.OPERATOR, Role.APPROVER, Role.MANAGER, export=True)
def runs(request: HttpRequest, tenant: Tenant) -> HttpResponseBase:
    form = RunFilter(request.GET, tenant=tenant)
    template = "console/explorer_runs.html"
    return _list_page(request, tenant, form, template, search_runs, export_runs, RUN_COLUMNS)


@console_view(Role.OPERATOR, Role.APPROVER, Role.MANAGER, target="run")
def run_timeline(request: HttpRequest, tenant: Tenant, pk: int) -> HttpResponse:
    """Every call of one run in order: its decision, observation, and whether it was a dedup hit
    (the key already had a record, so no second side effect could start). Keyset pages of
    ``TIMELINE_PAGE`` calls on (created_at, id), ``after=<id of the last call shown>``."""
    runs = Run.objects.select_related("combination")
    run = get_for_tenant(request, tenant, runs, pk, "No such run.")
    entries = LedgerEntry.objects.filter(run=run)
    after = request.GET.get("after", "")
    if after:
        after_id = parse_id(after)
        last = (
            entries.filter(pk=after_id).values_list("created_at", flat=True).first()
            if after_id is not None
            else None
        )
        if last is None:
            raise Http404("No such call in this run.")
        entries = entries.filter(Q(created_at__gt=last) | Q(created_at=last, pk__gt=after_id))
    page = list(
        entries.select_related("tool", "record")
        .only(*TIMELINE_FIELDS)
        .order_by("created_at", "pk")[: TIMELINE_PAGE + 1]
    )
    more = len(page) > TIMELINE_PAGE
    page = page[:TIMELINE_PAGE]
    return render(
        request,
        "console/run_timeline.html",
        context_for(
            request,
            tenant,
            run=run,
            entries=page,
            next_after=page[-1].pk if more else None,
            paged=bool(after),
            dedup_hits=sum(1 for e in page if e.dedup_hit),
            offered=compensations.offered(e.record_id for e in page if e.record_id),
            run_offer=compensations.run_offer(run),
        ),
    )


@console_view(Role.OPERATOR, Role.APPROVER, Role.MANAGER, target="ledgerentry")
def call_detail(request: HttpRequest, tenant: Tenant, pk: int) -> HttpResponse:
    """One call: its (redacted) input, classification and rule, decision, the observation the
    model gets, its action's record and look-ups, approvals, and the timeline."""
    entries = LedgerEntry.objects.select_related("run", "tool", "record", "combination")
    entry = get_for_tenant(request, tenant, entries, pk, "No such call.")
    return render(
        request,
        "console/call_detail.html",
        context_for(request, tenant, entry=entry, **selectors.call_page(entry)),
    )


@console_view(Role.OPERATOR, Role.APPROVER, Role.MANAGER, target="ledgerentry")
def call_by_id(request: HttpRequest, tenant: Tenant, call_id: uuid.UUID) -> HttpResponse:
    """A call by the id the API gives it (``call_id``, in logs and traces): its page."""
    entries = LedgerEntry.objects.only("pk", "tenant")
    entry = get_for_tenant_by(request, tenant, entries, "No such call.", call_id=call_id)
    return redirect(object_url("call", entry.pk))
