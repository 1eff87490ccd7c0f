"""One search box for any id: the top bar of every console page sends what is pasted in it to
``/ledger/find?id=``.

What a text is matched against, each within the member's tenant and read from an index:

- a call: its whole id (a uuid, with or without dashes, in any case; the unique index on
  ``call_id``), or its first 8 or more characters (``entry_call_prefix_idx``);
- a run: its whole id (``run_unique_id``), whatever it looks like (a run id may be a uuid);
- an action: its whole idempotency key (``record_unique_key``), or any 3 or more characters of
  a key, as the ledger's key filter searches them (``explorer.key_lookup``), leaving out the
  actions of a run the text names whole (a run-scoped key carries its run's id);
- an approval and an audit event, by their number: ``approval 12``, ``Approval #12``,
  ``approvalrequest:12`` (as an audit event names its target), ``audit event 7``, and the same
  with the words the console shows in the member's language; a bare ``12`` or ``#12`` is
  either;
- a string anywhere in an action's recorded result or error (a downstream's order id), or in
  the evidence a call's report gave: equal to the whole text, from ``record_values_idx`` and
  ``entry_evidence_values_idx`` (``ledger.models.json_strings``).

One match whose page the member's role opens is that page (a redirect); several are listed,
each with its kind and, where the role opens it, a link; none is a 404 page that says what was
searched. Another tenant's ids match nothing, so they get that same page.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any

from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _

from console.access import console_view, missing_id
from console.explorer import MIN_FRAGMENT, WHOLE_CALL_ID, key_lookup
from console.navigation import context_for
from console.templatetags.target_links import object_url
from ledger.models import ApprovalRequest, AuditEvent, IdempotencyRecord, LedgerEntry, Run, Tenant

#: The longest text searched: the longest id there is (an idempotency key).
MAX_QUERY = 1024
#: The most matches of one kind listed (the ledger lists every call of a key part or call-id
#: start, linked from the page).
SHOWN = 20
#: The shortest start of a call id searched: a uuid's first group, as logs cut it.
MIN_CALL_START = 8
#: A bigint's digits, less one: no longer number can be a row's id.
MAX_DIGITS = 18

_HEX_UUID = re.compile(r"^[0-9a-f]{32}$")
_CALL_START = re.compile(r"^[0-9a-f][0-9a-f-]*$")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
# A number, after a word that names its kind (or none): "approval 12", "Audit event #7",
# "auditevent:7", "审批 #12", "#12", "12".
_NUMBERED = re.compile(r"^(?P<word>[^\W\d_]+(?:[ _-][^\W\d_]+)*)?[\s:#-]*(?P<number>\d+)$")

APPROVAL, AUDIT_EVENT = "approval", "audit_event"
#: The words a number's kind is named by, as ``read_query`` compares them (lower case, no
#: spaces, underscores or dashes); the view adds those the console shows in the member's
#: language.
NAMES = {
    "approval": APPROVAL,
    "approvalrequest": APPROVAL,
    "audit": AUDIT_EVENT,
    "auditevent": AUDIT_EVENT,
    "event": AUDIT_EVENT,
}


class InvalidQuery(ValueError):
    """A text that is no id to search for; the message says why (translated)."""


@dataclass(frozen=True)
class Query:
    """What a pasted text may name (``read_query``)."""

    text: str
    #: A whole call id.
    call_id: uuid.UUID | None = None
    #: The start of a call id, as PostgreSQL writes one (lower case).
    call_start: str | None = None
    #: An approval's or an audit event's number, and which of the two it may be.
    number: int | None = None
    numbered: set[str] = field(default_factory=set)
    #: Long enough to be searched as part of a key.
    fragment: bool = False


def _name(word: str) -> str:
    return re.sub(r"[\s_-]", "", word).lower()


def read_query(text: str, *, names: Mapping[str, str] | None = None) -> Query:
    """What ``text`` (trimmed) may name; ``names`` maps more words (in ``_name``'s form) than
    ``NAMES`` to the kind of number they name. Raises ``InvalidQuery`` for an empty text, one
    longer than any id, or one with a control character (no id has one)."""
    text = text.strip()
    if not text:
        raise InvalidQuery(
            gettext(
                "Type or paste an id to find: a call, run, key or part of one, approval, audit "
                "event, or an id in a recorded result."
            )
        )
    if len(text) > MAX_QUERY:
        raise InvalidQuery(
            gettext("An id is at most %(most)s characters; this text has %(n)s.")
            % {"most": f"{MAX_QUERY:,}", "n": f"{len(text):,}"}
        )
    if _CONTROL.search(text):
        raise InvalidQuery(gettext("An id has no control characters (tabs, line breaks)."))
    lowered = text.lower()
    whole = WHOLE_CALL_ID.match(lowered) or _HEX_UUID.match(lowered)
    call_id = uuid.UUID(lowered) if whole else None
    call_start = None
    if call_id is None and MIN_CALL_START <= len(lowered) < 36 and _CALL_START.match(lowered):
        call_start = lowered
    number, numbered = None, set()
    found = _NUMBERED.match(text)
    if found and len(found["number"]) <= MAX_DIGITS and found["number"].isascii():
        word = found["word"]
        kind = {**NAMES, **(names or {})}.get(_name(word)) if word else None
        if not word or kind is not None:
            number = int(found["number"])
            numbered = {kind} if kind else {APPROVAL, AUDIT_EVENT}
    return Query(
        text=text,
        call_id=call_id,
        call_start=call_start,
        number=number,
        numbered=numbered,
        fragment=len(text) >= MIN_FRAGMENT,
    )


#: Each kind of match: what the page calls it.
KINDS = {
    "call": _("Call"),
    "run": _("Run"),
    "key": _("Action (its whole key)"),
    "approval": _("Approval"),
    "audit_event": _("Audit event"),
    "call_start": _("Call (its id starts so)"),
    "key_part": _("Action (its key holds this)"),
    "result": _("Action (in its recorded result or error)"),
    "evidence": _("Action (in the evidence a call reported)"),
}


#: The kinds that match a part of what they show: that part is marked.
MARKED = frozenset({"call_start", "key_part"})


@dataclass(frozen=True)
class Match:
    """One object the text names: its ``kind`` (``KINDS``), its page (URL name and id: two
    matches of one object are one), what to show of it (the id; the tool, or the event's
    action; a state, shown as a term), the page a member whose role does not open its own is
    sent to instead (``via``: an approval's action), and the link the member's role opens
    (``url``; empty for none), and the text searched (``marked``)."""

    kind: str
    page: str
    pk: int
    shown: str
    detail: str = ""
    state: str = ""
    via: tuple[str, int] | None = None
    url: str = ""
    text: str = ""

    @property
    def kind_label(self) -> str:
        return str(KINDS[self.kind])

    def marking(self, text: str) -> Match:
        """This match with the part of it ``text`` is marked in (``marked``): the part of a
        key, the start of a call id."""
        return replace(self, text=text)

    @property
    def marked(self) -> tuple[str, str, str]:
        """What is shown of the match, cut around the text searched when it is a part of it
        (before, the part, after); whole, unmarked, otherwise."""
        if self.kind not in MARKED or not self.text:
            return (self.shown, "", "")
        at = self.shown.lower().find(self.text.lower())
        if at < 0:
            return (self.shown, "", "")
        end = at + len(self.text)
        return (self.shown[:at], self.shown[at:end], self.shown[end:])

    def linked(self, pages: set[str]) -> Match:
        """This match with the link of a member whose roles open ``pages``."""
        url = ""
        if self.page in pages:
            url = object_url(self.page, self.pk)
        elif self.via is not None and self.via[0] in pages:
            url = object_url(*self.via)
        return replace(self, url=url)


@dataclass
class Found:
    """Every match of a query, in ``KINDS`` order, one an object; ``more``: the kinds that had
    more than ``SHOWN``."""

    matches: list[Match] = field(default_factory=list)
    more: set[str] = field(default_factory=set)

    def add(self, rows: list[Any], match: Callable[[Any], Match]) -> None:
        """The first ``SHOWN`` of ``rows`` (read ``SHOWN + 1``, to know if there are more),
        ``match(row)`` each, but an object already matched."""
        seen = {(m.page, m.pk) for m in self.matches}
        for row in rows[:SHOWN]:
            found = match(row)
            if (found.page, found.pk) not in seen:
                seen.add((found.page, found.pk))
                self.matches.append(found)
            if len(rows) > SHOWN:
                self.more.add(found.kind)


def _first(rows: QuerySet[Any]) -> list[Any]:
    return list(rows[: SHOWN + 1])


def _newest(rows: list[Any]) -> list[Any]:
    return sorted(rows, key=lambda row: row.pk, reverse=True)


def recorded_value_matches(
    tenant: Tenant, text: str
) -> tuple[QuerySet[IdempotencyRecord], QuerySet[LedgerEntry]]:
    """The tenant's actions whose recorded result or error holds the string ``text``, and its
    calls whose report's evidence does, each read from its index, as the page shows them."""
    records = IdempotencyRecord.holding_string(tenant.pk, text)
    entries = LedgerEntry.holding_string(tenant.pk, text).filter(record__isnull=False)
    # No ORDER BY: the newest first would let the planner walk the primary key backwards,
    # testing every row's strings until it found enough, instead of reading the index.
    return (
        records.select_related("tool").only("key", "state", "tool__name").order_by(),
        entries.select_related("tool", "record")
        .only("idempotency_key", "tool__name", "record__state")
        .order_by(),
    )


def find_matches(tenant: Tenant, query: Query) -> Found:
    """Everything of ``tenant`` that ``query`` names, as the module's docstring lists; at most
    ``SHOWN`` of a kind. One statement a kind the text's shape allows (at most seven)."""
    found = Found()
    text = query.text
    entries = LedgerEntry.objects.filter(tenant=tenant).select_related("tool", "record")
    entries = entries.only("call_id", "idempotency_key", "status", "tool__name", "record__state")
    if query.call_id is not None:
        found.add(_first(entries.filter(call_id=query.call_id)), partial(_call, "call"))
    runs = list(Run.objects.filter(tenant=tenant, run_id=text).only("run_id", "status")[:1])
    found.add(runs, lambda run: Match("run", "run", run.pk, run.run_id, state=run.status))
    records = IdempotencyRecord.objects.filter(tenant=tenant, key=text).select_related("tool")
    records = records.only("key", "state", "tool__name")
    found.add(_first(records), partial(_record, "key"))
    if query.number is not None and APPROVAL in query.numbered:
        approvals = ApprovalRequest.objects.filter(tenant=tenant, pk=query.number)
        approvals = approvals.select_related("record__tool")
        found.add(_first(approvals.only("state", "record__tool__name")), _approval)
    if query.number is not None and AUDIT_EVENT in query.numbered:
        events = AuditEvent.objects.filter(tenant=tenant, pk=query.number).only("action")
        found.add(_first(events), _event)
    if query.call_start is not None:
        starts = entries.filter(call_id__startswith=query.call_start)
        found.add(_first(starts), partial(_call, "call_start"))
    if query.fragment:
        # A run-scoped key holds its run's id: the run named whole is what the text names.
        parts = entries.filter(record__isnull=False, **{key_lookup(text): text})
        parts = parts.exclude(run__in=[run.pk for run in runs])
        found.add(_first(parts.order_by("-created_at", "-pk")), partial(_entry_record, "key_part"))
    results, evidence = recorded_value_matches(tenant, text)
    found.add(_newest(_first(results)), partial(_record, "result"))
    found.add(_newest(_first(evidence)), partial(_entry_record, "evidence"))
    return found


def _call(kind: str, entry: LedgerEntry) -> Match:
    return Match(kind, "call", entry.pk, str(entry.call_id), entry.tool.name, entry.status)


def _record(kind: str, record: IdempotencyRecord) -> Match:
    return Match(kind, "record", record.pk, record.key, record.tool.name, record.state)


def _entry_record(kind: str, entry: LedgerEntry) -> Match:
    """The action of ``entry``, matched as ``kind``."""
    assert entry.record_id is not None and entry.record is not None
    return Match(
        kind, "record", entry.record_id, entry.idempotency_key, entry.tool.name, entry.record.state
    )


def _approval(approval: ApprovalRequest) -> Match:
    return Match(
        "approval",
        "approval",
        approval.pk,
        f"#{approval.pk}",
        approval.record.tool.name,
        approval.state,
        via=("record", approval.record_id),
    )


def _event(event: AuditEvent) -> Match:
    return Match("audit_event", "audit_event", event.pk, f"#{event.pk}", event.action)


def _names() -> dict[str, str]:
    """The words the console shows for the two kinds in the current language."""
    return {_name(gettext("Approval")): APPROVAL, _name(gettext("Audit event")): AUDIT_EVENT}


#: The kinds the ledger's list of calls searches too, and its filter for them: the page
#: links to every call they match.
LEDGER_FILTERS = {"call_start": "call", "key_part": "key"}


@console_view()
def find(request: HttpRequest, tenant: Tenant) -> HttpResponse:
    """``?id=`` any id, pasted whole (or part of a key): its page when it names one object the
    member's role opens; otherwise the list of what it names (200), or a page saying what was
    searched (404; 400 for a text that is no id)."""
    text = request.GET.get("id", "")
    try:
        query = read_query(text, names=_names())
    except InvalidQuery as error:
        shown = text.strip()[:MAX_QUERY]
        context = context_for(request, tenant, error=str(error), find_text=shown)
        return render(request, "console/find.html", context, status=400)
    found = find_matches(tenant, query)
    if query.call_id is not None and not found.matches:
        missing_id(request, tenant, LedgerEntry, call_id=query.call_id)  # a probe, perhaps
    context = context_for(request, tenant, find_text=query.text)
    pages: set[str] = context["pages"]  # type: ignore[assignment]
    matches = [match.linked(pages).marking(query.text) for match in found.matches]
    if len(matches) == 1 and matches[0].page in pages:
        return redirect(matches[0].url)
    kinds = {match.kind for match in matches}
    context.update(
        text=query.text,
        matches=matches,
        shown=SHOWN,
        more=found.more,
        ledger_filters=[(kind, name) for kind, name in LEDGER_FILTERS.items() if kind in kinds]
        if "calls" in pages
        else [],
    )
    return render(request, "console/find.html", context, status=200 if matches else 404)
