"""The operator console: function views, one template each, fragments from the same template.

Every page works without JavaScript (links and POST forms with redirect-after-POST); HTMX only
makes it quicker (polling the inbox, swapping fragments).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

from django import forms
from django.conf import settings
from django.contrib import messages
from django.contrib.auth.models import AbstractBaseUser
from django.db.models import Case, QuerySet, Value, When
from django.http import Http404, HttpRequest, HttpResponse
from django.http.response import HttpResponseBase
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils.http import url_has_allowed_host_and_scheme
from django.utils.timezone import get_current_timezone_name
from django.utils.translation import get_language, gettext_lazy
from django.utils.translation import gettext as _

from console import charts as charts_mod
from console import claims, diffs, selectors, states
from console.access import TENANT_SESSION_KEY, console_view, get_for_tenant
from console.audit_export import AUDIT_COLUMNS
from console.compensation_setup import CompensationSetupForm, initial_for, set_ups, tool_names
from console.csv_export import Columns, csv_response, export_href, in_chunks
from console.denials import Reason, record_denial
from console.filters import TimeRangeForm, WindowForm
from console.forbidden import refusal
from console.lifecycle import actions_for
from console.members import request_has_role, request_roles, tenants_of
from console.navigation import context_for, pages_for
from console.params import parse_id
from console.preferences import save_language, save_time_zone, time_zones
from console.sessions import polled
from console.templatetags.humanize_age import countdown_formats
from ledger import combinations
from ledger.combinations import thresholds
from ledger.domain import Idempotency, ServerTrust
from ledger.errors import InvalidInput, LedgerError
from ledger.models import (
    ApprovalRequest,
    AuditEvent,
    Tenant,
    Threshold,
    Tool,
    VersionCombination,
)
from ledger.permissions import Role
from ledger.records import decide_approval, not_landed
from ledger.services import approvals as approvals_service
from ledger.services import metrics, regressions
from ledger.services.registry import declare_key_fields, import_mcp_tools, override_tool
from reconcile import compensation_requests, compensations

PAGE_SIZE = 50


@console_view(export=False)
def home(request: HttpRequest, tenant: Tenant) -> HttpResponse:
    """What needs a human now, and for managers the candidates that do worse than the active
    combination; the inbox fragment refreshes itself by polling."""
    context = context_for(request, tenant, inbox=selectors.inbox(tenant))
    if "combinations" in pages_for(request_roles(request, tenant)):
        context["regressions"] = regressions.regressions(tenant)
    template = "console/home.html#inbox" if getattr(request, "htmx", False) else "console/home.html"
    return render(request, template, context)


@console_view(methods=("POST",))
def set_language(request: HttpRequest, tenant: Tenant) -> HttpResponse:
    """Save the user's console language (kept for them, not for the browser)."""
    language = request.POST.get("language", "")
    if language not in dict(settings.LANGUAGES):
        messages.error(request, _("Unknown language."))
    else:
        save_language(request, language)
    target = request.POST.get("next", "")
    if not url_has_allowed_host_and_scheme(target, {request.get_host()}, request.is_secure()):
        target = reverse("console:home")
    return redirect(target)


@console_view(methods=("GET", "POST"), export=False)
def preferences_page(request: HttpRequest, tenant: Tenant) -> HttpResponse:
    """The user's own settings: the console's language and the time zone of every time shown."""
    if request.method == "POST":
        language = request.POST.get("language", "")
        zone = request.POST.get("time_zone", "")
        errors = {}
        if language not in dict(settings.LANGUAGES):
            errors["language"] = _("Choose one of the languages offered.")
        if zone not in time_zones():
            errors["time_zone"] = _("Choose one of the time zones offered.")
        if not errors:
            save_language(request, language)
            save_time_zone(request, zone)
            messages.success(request, _("Your settings are saved."))
            return redirect("console:preferences")
        return render(
            request,
            "console/preferences.html",
            context_for(
                request,
                tenant,
                zones=time_zones(),
                errors=errors,
                chosen={"language": language, "time_zone": zone},
            ),
            status=400,
        )
    return render(
        request,
        "console/preferences.html",
        context_for(
            request,
            tenant,
            zones=time_zones(),
            errors={},
            chosen={"language": get_language(), "time_zone": get_current_timezone_name()},
        ),
    )


@console_view(methods=("POST",))
def switch_tenant(request: HttpRequest, tenant: Tenant) -> HttpResponse:
    wanted = request.POST.get("tenant", "")
    if not any(str(t.pk) == wanted for t in tenants_of(request)):
        record_denial(
            request,
            reason=Reason.TENANT,
            tenant=tenant,
            target=("tenant", wanted[:100]),
            detail="switching to a tenant they are not a member of",
        )
        raise Http404("No such tenant.")
    request.session[TENANT_SESSION_KEY] = int(wanted)
    return redirect("console:home")


@dataclass(frozen=True)
class Triage:
    """What an approver weighs before opening one: the file, the size of the change, the
    combination it ran under and how long is left to decide."""

    path: str
    added: int
    removed: int
    combination: str
    expires_in_seconds: int


def _triage(approval: ApprovalRequest) -> Triage:
    """From a row of ``selectors.pending_approvals`` (its write plan's path and diff, if any,
    and the time it has left by the database's clock)."""
    path: str | None = getattr(approval, "plan_path", None)
    diff: str = getattr(approval, "plan_diff", None) or ""
    added, removed = diffs.summary(diff) if path is not None else (0, 0)
    combination = approval.entry.combination
    left = getattr(approval, "expires_in", None)
    left = left.total_seconds() if left is not None else 0
    return Triage(
        path=path or "",
        added=added,
        removed=removed,
        combination=combination.label if combination else "",
        expires_in_seconds=max(0, int(left)),
    )


class ApprovalFilter(TimeRangeForm):
    """The approvals queue's filters, all in the URL: the tool (any part of its name), when it
    was requested, and the order."""

    tool = forms.CharField(label=gettext_lazy("Tool"), required=False, max_length=200)
    order = forms.ChoiceField(
        label=gettext_lazy("Order"),
        required=False,
        choices=[
            ("oldest", gettext_lazy("oldest first")),
            ("newest", gettext_lazy("newest first")),
        ],
    )
    field_order = ("tool", "range", "since", "until", "order")

    def filters(self) -> dict[str, Any]:
        data = self.cleaned_data
        return {
            "order": data["order"] or "oldest",
            "tool": data["tool"].strip(),
            "window": self.in_range("created_at"),
        }


#: The columns of the approvals queue's CSV export: the page's, in its order.
#: Each row is ``(approval, who has it open, its triage)``, as the page's rows are.
APPROVAL_COLUMNS: Columns = [
    ("tool", lambda row: row[0].record.tool.name),
    ("file", lambda row: row[2].path),
    ("added", lambda row: row[2].added),
    ("removed", lambda row: row[2].removed),
    ("combination", lambda row: row[2].combination),
    ("run_id", lambda row: row[0].entry.run.run_id),
    ("requested_by", lambda row: row[0].requested_by),
    ("requested_at", lambda row: row[0].created_at.isoformat()),
    ("expires_at", lambda row: row[0].expires_at.isoformat()),
    ("open_by", lambda row: row[1] or ""),
    ("approval_id", lambda row: row[0].pk),
]


def _approval_row(approval: ApprovalRequest) -> tuple[ApprovalRequest, str | None, Triage]:
    return approval, claims.holder(approval), _triage(approval)


@console_view(Role.APPROVER, export=True)
def approvals(request: HttpRequest, tenant: Tenant) -> HttpResponseBase:
    """The approvals still waiting (``approvals_service.still_open``), filtered; the list
    refreshes itself by polling, and each expiry counts down in the browser."""
    form = ApprovalFilter(request.GET)
    rows: list[tuple[ApprovalRequest, str | None, Triage]] = []
    if form.is_valid():
        if request.GET.get("format") == "csv":
            waiting = selectors.all_pending_approvals(tenant, **form.filters())
            every = map(_approval_row, in_chunks(waiting))
            return csv_response(f"{tenant.slug}-approvals.csv", APPROVAL_COLUMNS, every)
        rows = [_approval_row(a) for a in selectors.pending_approvals(tenant, **form.filters())]
    query = form.query_without_cursor()
    return render(
        request,
        "console/approvals.html",
        context_for(
            request,
            tenant,
            form=form,
            approvals=rows,
            export_href=export_href(query) if form.is_valid() else None,
            countdown_formats=countdown_formats(),
        ),
        status=200 if form.is_valid() else 400,
    )


def _get_approval_for_user(request: HttpRequest, tenant: Tenant, pk: int) -> ApprovalRequest:
    approvals = ApprovalRequest.objects.select_related(
        "record__tool",
        "entry__run__combination",
        "entry__tool",
        "entry__combination",
        "requested_by_user",
    )
    return get_for_tenant(request, tenant, approvals, pk, "No such approval.")


@console_view(Role.APPROVER, target="approvalrequest")
def approval_detail(request: HttpRequest, tenant: Tenant, pk: int) -> HttpResponse:
    approval = _get_approval_for_user(request, tenant, pk)
    plan = approval.record.write_plan
    lines = diffs.parse(plan.diff) if plan else []
    assert isinstance(request.user, AbstractBaseUser)  # console_view signed them in
    own = approvals_service.refusal_of_decider(approval, request.user) is not None
    check = approval.record.reconcile_attempts_log.order_by("-created_at").first()
    timeline = selectors.approval_timeline(approval)
    requested = next((e for e in timeline if e.action == "approval.requested"), None)
    pending = approval.state == ApprovalRequest.State.PENDING
    void = approvals_service.void_reason(approval) if pending else None
    # Opening the page claims the approval; the page polling itself only reads who has it.
    claim = claims.taken if polled(request) else claims.claim
    taken_by = claim(approval, request.user) if pending and not own else None
    # A compensation is sent by a worker once approved, not run by the model's runtime.
    compensation = compensations.compensation_of_approval(approval)
    return render(
        request,
        "console/approval_detail.html",
        context_for(
            request,
            tenant,
            approval=approval,
            plan=plan,
            lines=lines,
            pairs=diffs.side_by_side(lines),
            void=void,
            own=own,
            taken_by=taken_by,
            neighbours=selectors.queue_neighbours(approval),
            check=check,
            requested=requested,
            timeline=timeline,
            compensation=compensation,
            can_decide=pending and void is None and not own,
        ),
    )


@console_view(Role.APPROVER, methods=("POST",), target="approvalrequest")
def approval_decide(request: HttpRequest, tenant: Tenant, pk: int) -> HttpResponse:
    approval = _get_approval_for_user(request, tenant, pk)
    approve = request.POST.get("decision") == "approve"
    reason = request.POST.get("reason", "").strip()
    assert isinstance(request.user, AbstractBaseUser)  # console_view signed them in
    following = selectors.queue_neighbours(approval)["next"]  # read while it still waits
    settles = not approve and not_landed(approval.record)  # decide_approval settles it
    compensation = compensations.compensation_of_approval(approval)
    try:
        if compensation is not None:  # a compensation runs once approved, and needs a reason
            compensation_requests.decide_compensation(
                compensation=compensation, user=request.user, approve=approve, reason=reason
            )
        else:
            decide_approval(approval=approval, user=request.user, approve=approve, reason=reason)
    except approvals_service.DeciderRefused as exc:
        return refusal(request, tenant=tenant, message=exc.message)  # audited by decide
    except LedgerError as exc:
        messages.error(request, exc.message)
        return redirect("console:approval", pk=approval.pk)
    claims.release(approval)
    label = states.call_label(approval.record)
    if compensation is not None:
        done = _("approved; a worker runs it.") if approve else _("rejected.")
    elif approve:
        done = _("approved.")
    elif settles:
        done = _("rejected; it is settled as not happened.")
    else:
        done = _("rejected; the model is told why.")
    messages.success(request, f"{label}: {done}")
    if following is not None:  # on to the next approval of the queue
        return redirect("console:approval", pk=following)
    return redirect("console:approvals")


#: The list shows what runs first: active, canaries, shadow, halted, then new and retired.
_LIFECYCLE_ORDER = Case(
    *(
        When(state=state, then=Value(n))
        for n, state in enumerate(["active", "canary", "shadow", "halted", "new", "retired"])
    ),
    default=Value(9),
)


#: The columns of the combinations list's CSV export: the page's, in its order. Each row is
#: ``(combination, its metrics summary)``, as the page's rows are.
COMBINATION_COLUMNS: Columns = [
    ("combination", lambda row: row[0].label),
    ("state", lambda row: row[0].state),
    ("canary_share_bp", lambda row: row[0].canary_share_bp),
    ("model", lambda row: row[0].model),
    ("prompt", lambda row: row[0].prompt),
    ("rules", lambda row: row[0].rules),
    ("tool_schema", lambda row: row[0].tool_schema),
    ("data_version", lambda row: row[0].data_version),
    ("keyed_requests", lambda row: row[1].keyed_requests),
    ("dedup_hit_rate", lambda row: row[1].dedup_hit_rate),
    ("became_uncertain", lambda row: row[1].became_uncertain),
    ("uncertain_now", lambda row: row[1].uncertain_now),
    ("duplicate_side_effects", lambda row: row[1].duplicate_side_effects),
    ("combination_id", lambda row: row[0].pk),
]


@console_view(Role.MANAGER, export=True)
def combinations_page(request: HttpRequest, tenant: Tenant) -> HttpResponseBase:
    """Active, canary and previous combinations side by side, with their metrics over the
    chosen window."""
    window = WindowForm(request.GET)
    since, _end = window.span()
    summaries = metrics.by_combination(tenant, since=since)
    rows = [
        (combination, summaries.get(combination.pk, metrics.Summary()), actions_for(combination))
        for combination in VersionCombination.objects.filter(tenant=tenant).order_by(
            _LIFECYCLE_ORDER, "-activated_at", "-pk"
        )
    ]
    if request.GET.get("format") == "csv":
        return csv_response(f"{tenant.slug}-combinations.csv", COMBINATION_COLUMNS, rows)
    return render(
        request,
        "console/combinations.html",
        context_for(
            request,
            tenant,
            rows=rows,
            window=window,
            export_href=export_href(urlencode({"range": window.chosen})),
        ),
    )


def _get_combination_for_user(request: HttpRequest, tenant: Tenant, pk: int) -> VersionCombination:
    combinations = VersionCombination.objects.all()
    return get_for_tenant(request, tenant, combinations, pk, "No such combination.")


@console_view(Role.MANAGER, methods=("GET", "POST"), target="versioncombination")
def rollback_page(request: HttpRequest, tenant: Tenant, pk: int) -> HttpResponse:
    """GET: what a rollback would do (a dry run). POST: do it, then show what it did and the
    new state of everything it changed. When the combination replaced none that can be
    restored, nothing is chosen for the manager: the page says which combinations a rollback
    can restore (or that one must be created first) and previews once one is chosen."""
    combination = _get_combination_for_user(request, tenant, pk)
    data = request.POST if request.method == "POST" else request.GET
    reason = data.get("reason", "").strip()
    restore = data.get("restore", "")
    choices = combinations.restore_choices(tenant, combination)
    try:
        default = combinations.restore_target(tenant, combination, None)
        no_previous = False
    except combinations.NoRestoreTarget:
        default, no_previous = None, True
    needs_choice = no_previous and not restore
    report, error = None, ""
    try:
        restore_id = parse_id(restore) if restore else None
        if restore and restore_id is None:
            raise InvalidInput(_("Choose a combination to restore."))
        if needs_choice:
            raise InvalidInput(
                _(
                    "%(label)s replaced no combination that can be restored: choose the one "
                    "to make active instead."
                )
                % {"label": combination.label}
            )
        if request.method == "POST" and not reason:
            raise InvalidInput(_("A rollback needs a reason."))
        report = combinations.rollback(
            tenant=tenant,
            combination_id=combination.pk,
            actor=request.user.get_username(),
            source="console",
            reason=reason or "preview",
            restore_id=restore_id,
            dry_run=request.method != "POST",
        )
    except LedgerError as exc:
        error = exc.message
    if error and request.method == "POST":  # back to the preview, nothing done
        messages.error(request, error)
        preview = reverse("console:rollback", kwargs={"pk": combination.pk})
        return redirect(f"{preview}?restore={restore}" if parse_id(restore) else preview)
    if report is not None and not report.dry_run:
        combination.refresh_from_db()
    known = {c.pk: c for c in [combination, *choices]}
    return render(
        request,
        "console/rollback.html",
        context_for(
            request,
            tenant,
            combination=combination,
            report=report,
            error=error if not needs_choice else "",
            needs_choice=needs_choice,
            no_previous=no_previous,
            changes=selectors.rollback_changes(tenant, report) if report else None,
            choices=choices,
            default=default,
            restore=restore,
            # Read afresh: a rollback just made it active.
            restored=VersionCombination.objects.filter(tenant=tenant, pk=report.restored).first()
            if report and report.restored
            else None,
            active=VersionCombination.objects.filter(
                tenant=tenant, state=VersionCombination.State.ACTIVE
            ).first(),
            # Each step with the combination it names, to be worded in the user's language.
            steps=[
                (step["kind"], step["args"], known.get(step["args"].get("combination")))
                for step in (report.steps if report else [])
            ],
        ),
    )


class AuditFilter(TimeRangeForm):
    """The audit log's filters, all in the URL: who (any part of the name), the action (its
    start: ``approval.`` is every approval event), the outcome and when."""

    actor = forms.CharField(label=gettext_lazy("Actor"), required=False, max_length=200)
    action = forms.CharField(
        label=gettext_lazy("Action"),
        required=False,
        max_length=100,
        widget=forms.TextInput(attrs={"placeholder": gettext_lazy("or its start, e.g. approval.")}),
    )
    outcome = forms.ChoiceField(
        label=gettext_lazy("Outcome"),
        required=False,
        choices=[
            ("", gettext_lazy("any")),
            ("success", gettext_lazy("success")),
            ("denied", gettext_lazy("denied")),
        ],
    )
    before = forms.IntegerField(required=False, min_value=1, widget=forms.HiddenInput)
    field_order = ("actor", "action", "outcome", "range", "since", "until")

    def events(self, tenant: Tenant) -> QuerySet[AuditEvent]:
        """The tenant's events these filters match, newest first (all pages)."""
        data = self.cleaned_data
        events = AuditEvent.objects.filter(tenant=tenant).filter(self.in_range("created_at"))
        if data["actor"].strip():
            events = events.filter(actor__icontains=data["actor"].strip())
        if data["action"].strip():
            events = events.filter(action__startswith=data["action"].strip())
        if data["outcome"]:
            events = events.filter(outcome=data["outcome"])
        return events.order_by("-pk")


@console_view(export=True)
def audit_log(request: HttpRequest, tenant: Tenant) -> HttpResponseBase:
    """Every human and system action of this tenant, newest first, filterable, keyset-paged
    (``before=<id of the last event shown>``)."""
    form = AuditFilter(request.GET)
    page: list[AuditEvent] = []
    more = False
    if form.is_valid():
        events = form.events(tenant)
        if request.GET.get("format") == "csv":
            return csv_response(f"{tenant.slug}-audit.csv", AUDIT_COLUMNS, events)
        if before := form.cleaned_data["before"]:
            events = events.filter(pk__lt=before)
        page = list(events[: PAGE_SIZE + 1])
        more = len(page) > PAGE_SIZE
        page = page[:PAGE_SIZE]
    query = form.query_without_cursor()
    return render(
        request,
        "console/audit.html",
        context_for(
            request,
            tenant,
            form=form,
            events=page,
            query=query,
            paged=bool(form.data.get("before")),
            next_before=page[-1].pk if more and page else None,
            export_href=export_href(query) if form.is_valid() else None,
        ),
        status=200 if form.is_valid() else 400,
    )


#: The columns of the tool registry's CSV export: the page's, in its order.
TOOL_COLUMNS: Columns = [
    ("tool", lambda t: t.name),
    ("kind", lambda t: t.kind),
    ("server", lambda t: t.server.name if t.server else ""),
    ("server_trust", lambda t: t.server.trust if t.server else ""),
    ("idempotency", lambda t: t.idempotency),
    ("replay_policy", lambda t: t.replay_policy),
    ("destructive", lambda t: t.destructive),
    ("reason", lambda t: t.reason),
    ("rule", lambda t: t.rule),
    ("override_idempotency", lambda t: t.override_idempotency or ""),
    ("override_destructive", lambda t: t.override_destructive),
]
#: The most tools the registry's page shows (its CSV export has them all).
TOOL_PAGE = 500


@console_view(export=True)
def tools_page(request: HttpRequest, tenant: Tenant) -> HttpResponseBase:
    """The registry: every tool's classification with its reason and rule, and each tool's
    compensation (``?compensation=<tool>`` fills the form in with that one, to change it)."""
    tools = Tool.objects.filter(tenant=tenant).select_related("server").order_by("name")
    if request.GET.get("format") == "csv":
        return csv_response(f"{tenant.slug}-tools.csv", TOOL_COLUMNS, tools)
    return _tools(request, tenant, tools, form=None)


def _tools(
    request: HttpRequest,
    tenant: Tenant,
    tools: QuerySet[Tool],
    *,
    form: CompensationSetupForm | None,
    status: int = 200,
) -> HttpResponse:
    """The Tools page; ``form`` is a compensation set-up that was refused, with its errors."""
    declared = set_ups(tenant)
    can_edit = request_has_role(request, tenant, Role.MANAGER)
    if form is None and can_edit:
        changed = request.GET.get("compensation", "")
        chosen = next((d for d in declared if d.tool_name == changed), None)
        form = CompensationSetupForm(tools=tool_names(tenant), initial=initial_for(chosen))
    return render(
        request,
        "console/tools.html",
        context_for(
            request,
            tenant,
            tools=tools[:TOOL_PAGE],
            declared=declared,
            compensation_form=form,
            can_edit=can_edit,
            idempotency_choices=[i.value for i in Idempotency],
            export_href=export_href(""),
        ),
        status=status,
    )


@console_view(Role.MANAGER, methods=("POST",))
def tool_compensation(request: HttpRequest, tenant: Tenant) -> HttpResponse:
    """Set up (or change) how a tool's action is undone: its compensating tool, the arguments,
    and the adapters a worker runs it through. A refusal shows the page again with the error
    beside its field, and writes nothing."""
    form = CompensationSetupForm(request.POST, tools=tool_names(tenant))
    if form.is_valid():
        data = form.cleaned_data
        tool = Tool.objects.get(tenant=tenant, name=data["tool"])  # one of the form's choices
        try:
            compensations.set_up_compensation(
                tool=tool,
                compensating_tool=data["compensating_tool"],
                arguments=data["arguments"],
                url_template=data["url_template"],
                success_statuses=data["success_statuses"],
                lookup_url_template=data["lookup_url_template"],
                actor=request.user.get_username(),
                source=AuditEvent.Source.CONSOLE,
            )
        except compensations.SetupRefused as exc:
            for setting, error in exc.errors.items():
                form.add_error(setting if setting in form.fields else None, error)
        else:
            messages.success(
                request,
                _("Compensation of %(tool)s saved: %(by)s undoes it.")
                % {"tool": tool.name, "by": data["compensating_tool"]},
            )
            return redirect(reverse("console:tools") + "#compensations")
    tools = Tool.objects.filter(tenant=tenant).select_related("server").order_by("name")
    return _tools(request, tenant, tools, form=form, status=400)


@console_view(Role.MANAGER, methods=("POST",), target="tool")
def tool_override(request: HttpRequest, tenant: Tenant, pk: int) -> HttpResponse:
    """Set or clear a human override of a tool's classification (a reason is required)."""
    tool = get_for_tenant(request, tenant, Tool.objects.all(), pk, "No such tool.")
    choice = request.POST.get("idempotency", "")
    try:
        idempotency = Idempotency(choice) if choice else None
    except ValueError:
        messages.error(request, _("Unknown idempotency class."))
        return redirect("console:tools")
    try:
        override_tool(
            tool=tool,
            idempotency=idempotency,
            reason=request.POST.get("reason", ""),
            actor=request.user.get_username(),
            source="console",
            destructive=request.POST.get("destructive") == "on",
        )
    except LedgerError as exc:
        messages.error(request, exc.message)
        return redirect("console:tools")
    messages.success(request, _("Classification of %(tool)s saved.") % {"tool": tool.name})
    return redirect("console:tools")


@console_view(Role.MANAGER, methods=("POST",), target="tool")
def tool_key_fields(request: HttpRequest, tenant: Tenant, pk: int) -> HttpResponse:
    """Declare a tool's key fields (comma-separated argument paths; none: its arguments)."""
    tool = get_for_tenant(request, tenant, Tool.objects.all(), pk, _("No such tool."))
    paths = [path.strip() for path in request.POST.get("key_fields", "").split(",")]
    try:
        declare_key_fields(
            tenant=tenant,
            name=tool.name,
            key_fields=[path for path in paths if path],
            key_scope=None,
            actor=request.user.get_username(),
            source="console",
        )
    except LedgerError as exc:
        messages.error(request, exc.message)
        return redirect("console:tools")
    messages.success(request, _("Key fields of %(tool)s saved.") % {"tool": tool.name})
    return redirect("console:tools")


@console_view(Role.MANAGER, methods=("POST",))
def tools_import(request: HttpRequest, tenant: Tenant) -> HttpResponse:
    """Import an MCP server's tools/list result; every tool is re-classified."""
    try:
        listing = json.loads(request.POST.get("tools_list", ""))
    except json.JSONDecodeError as exc:
        messages.error(request, _("That is not valid JSON: %(error)s") % {"error": exc})
        return redirect("console:tools")
    trust = request.POST.get("trust", "untrusted")
    try:
        imported = import_mcp_tools(
            tenant=tenant,
            server_name=request.POST.get("server", ""),
            trust=ServerTrust(trust)
            if trust in ("trusted", "untrusted")
            else ServerTrust.UNTRUSTED,
            tools_list=listing,
            actor=request.user.get_username(),
            source="console",
        )
    except LedgerError as exc:
        messages.error(request, exc.message)
        return redirect("console:tools")
    messages.success(request, _("%(n)d tools imported and classified.") % {"n": len(imported)})
    return redirect("console:tools")


class ThresholdForm(forms.Form):
    """A threshold a manager adds on the metrics page (``thresholds.add_threshold`` checks the
    rest: the metric's range, the e-mail address)."""

    metric = forms.ChoiceField(choices=Threshold.Metric.choices)
    above = forms.FloatField()
    window_minutes = forms.IntegerField(initial=15)
    action = forms.ChoiceField(choices=Threshold.Action.choices, initial=Threshold.Action.ALERT)
    email = forms.CharField(required=False, max_length=254, strip=True)


@console_view(Role.MANAGER, methods=("GET", "POST"), export=False)
def metrics_page(request: HttpRequest, tenant: Tenant) -> HttpResponse:
    """Dedup hit rate, uncertain results and duplicate side effects over time per combination,
    and the thresholds that guard them (POST adds one; a refused one is shown again as typed,
    with its error)."""
    form = ThresholdForm(request.POST if request.method == "POST" else None)
    if form.is_bound:
        if not form.is_valid():
            messages.error(request, _("A threshold needs a metric, a number and a window."))
        else:
            try:
                thresholds.add_threshold(
                    tenant=tenant,
                    actor=request.user.get_username(),
                    source="console",
                    **form.cleaned_data,
                )
            except LedgerError as exc:
                messages.error(request, exc.message)
            else:
                messages.success(request, _("Threshold added."))
                return redirect("console:metrics")
    window = WindowForm(request.GET)
    span = window.span()
    since = span[0]
    tool = request.GET.get("tool", "").strip() or None
    by_combination = metrics.series_by_combination(
        tenant, since=since, tool=tool, hourly=window.hourly
    )
    labels_of = dict(
        VersionCombination.objects.filter(tenant=tenant, pk__in=list(by_combination)).values_list(
            "pk", "label"
        )
    )
    # The most recent combinations with activity, one line each (the palette has four).
    shown = sorted((pk for pk in by_combination if pk is not None), reverse=True)[:4]
    per_combo = {
        labels_of.get(pk, "—"): {p["bucket_start"]: p for p in by_combination[pk]} for pk in shown
    }
    buckets = sorted({b for points in per_combo.values() for b in points})

    def values(field: str, scale: float = 1.0) -> dict[str, list[float | None]]:
        # A bucket without this combination's traffic is a gap, not a zero.
        return {
            label: [
                round(float(points[b][field]) * scale, 4) if b in points else None for b in buckets
            ]
            for label, points in per_combo.items()
        }

    calls = _("calls")
    guards = list(Threshold.objects.filter(tenant=tenant).order_by("pk"))  # the lines and table
    limits = charts_mod.threshold_limits(guards)
    Metric = Threshold.Metric
    charts = [
        charts_mod.time_chart(
            "dedup",
            _("Dedup hit rate"),
            "%",
            span,
            buckets,
            values("dedup_hit_rate", 100),
            limits.get(Metric.DEDUP_HIT_RATE),
        ),
        charts_mod.time_chart(
            "uncertain",
            _("Calls that became uncertain"),
            calls,
            span,
            buckets,
            values("became_uncertain"),
            limits.get(Metric.UNCERTAIN_RESULTS),
        ),
        charts_mod.time_chart(
            "duplicates",
            _("Duplicate side effects"),
            calls,
            span,
            buckets,
            values("duplicate_side_effects"),
            limits.get(Metric.DUPLICATE_SIDE_EFFECTS),
        ),
    ]
    tools = sorted(metrics.by_tool(tenant, since=since).items())
    return render(
        request,
        "console/metrics.html",
        context_for(
            request,
            tenant,
            charts=charts,
            tools=tools,
            tool=tool or "",
            window=window,
            thresholds=guards,
            alerts=tenant.alerts.select_related("combination").order_by("-created_at")[:20],
            threshold_form=form,
        ),
        status=400 if form.is_bound else 200,
    )
