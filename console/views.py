"""The operator console: function views, one template each, fragments from the same template.

Every page works without JavaScript (links and POST forms with redirect-after-POST); HTMX only
makes it quicker (polling the inbox, swapping fragments).
"""

from __future__ import annotations

import json

from django.contrib import messages
from django.contrib.auth.models import AbstractBaseUser
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.utils.translation import gettext as _

from console import charts as charts_mod
from console import diffs, selectors
from console.access import TENANT_SESSION_KEY, console_view, tenants_of
from console.roles import Role, has_role, roles_of
from ledger.domain import Idempotency, ServerTrust
from ledger.errors import InvalidInput, LedgerError
from ledger.models import (
    ApprovalRequest,
    AuditEvent,
    IdempotencyRecord,
    Tenant,
    Threshold,
    Tool,
    VersionCombination,
    WritePlan,
)
from ledger.services import combinations, metrics, thresholds
from ledger.services.approvals import action_hash, decide
from ledger.services.records import Outcome, resolve_unknown
from ledger.services.registry import import_mcp_tools, override_tool
from reconcile import services as reconcile_services

PAGE_SIZE = 50


def _context(request: HttpRequest, tenant: Tenant, **extra: object) -> dict[str, object]:
    return {
        "tenant": tenant,
        "tenants": tenants_of(request),
        "roles": {r.value for r in roles_of(request.user)},
        **extra,
    }


@console_view()
def home(request: HttpRequest, tenant: Tenant) -> HttpResponse:
    """What needs a human now; the inbox fragment refreshes itself by polling."""
    context = _context(request, tenant, inbox=selectors.inbox(tenant))
    template = "console/home.html#inbox" if getattr(request, "htmx", False) else "console/home.html"
    return render(request, template, context)


@console_view(methods=("POST",))
def switch_tenant(request: HttpRequest, tenant: Tenant) -> HttpResponse:
    wanted = request.POST.get("tenant", "")
    if not any(str(t.pk) == wanted for t in tenants_of(request)):
        raise Http404("No such tenant.")
    request.session[TENANT_SESSION_KEY] = int(wanted)
    return redirect("console:home")


@console_view(Role.APPROVER)
def approvals(request: HttpRequest, tenant: Tenant) -> HttpResponse:
    order = "newest" if request.GET.get("order") == "newest" else "oldest"
    tool = request.GET.get("tool", "")
    rows = selectors.pending_approvals(tenant, order=order)
    if tool:
        rows = [a for a in rows if a.record.tool.name == tool]
    return render(
        request,
        "console/approvals.html",
        _context(request, tenant, approvals=rows, order=order, tool=tool),
    )


def _get_approval_for_user(tenant: Tenant, pk: int) -> ApprovalRequest:
    approval = (
        ApprovalRequest.objects.select_related(
            "record__tool", "entry__run", "entry__tool", "entry__combination"
        )
        .filter(tenant=tenant, pk=pk)
        .first()
    )
    if approval is None:
        raise Http404("No such approval.")  # another tenant's approval is not found either
    return approval


@console_view(Role.APPROVER)
def approval_detail(request: HttpRequest, tenant: Tenant, pk: int) -> HttpResponse:
    approval = _get_approval_for_user(tenant, pk)
    plan = WritePlan.objects.filter(entry__record=approval.record).order_by("pk").first()
    lines = diffs.parse(plan.diff) if plan else []
    stale = approval.state == ApprovalRequest.State.PENDING and (
        action_hash(approval.entry) != approval.action_hash
    )
    own = approval.requested_by == request.user.get_username()
    check = approval.record.reconcile_attempts_log.order_by("-created_at").first()
    return render(
        request,
        "console/approval_detail.html",
        _context(
            request,
            tenant,
            approval=approval,
            plan=plan,
            lines=lines,
            pairs=diffs.side_by_side(lines),
            stale=stale,
            own=own,
            check=check,
            timeline=selectors.approval_timeline(approval),
            can_decide=approval.state == ApprovalRequest.State.PENDING and not stale and not own,
        ),
    )


@console_view(Role.APPROVER, methods=("POST",))
def approval_decide(request: HttpRequest, tenant: Tenant, pk: int) -> HttpResponse:
    approval = _get_approval_for_user(tenant, pk)
    approve = request.POST.get("decision") == "approve"
    reason = request.POST.get("reason", "").strip()
    assert isinstance(request.user, AbstractBaseUser)  # console_view signed them in
    try:
        decide(approval=approval, user=request.user, approve=approve, reason=reason)
    except LedgerError as exc:
        messages.error(request, exc.message)
        return redirect("console:approval", pk=approval.pk)
    messages.success(request, _("Approved.") if approve else _("Rejected; the model is told why."))
    return redirect("console:approvals")


def _get_unknown_for_user(tenant: Tenant, pk: int) -> IdempotencyRecord:
    record = (
        IdempotencyRecord.objects.select_related("tool", "combination", "run")
        .filter(tenant=tenant, pk=pk)
        .first()
    )
    if record is None:
        raise Http404("No such call.")
    return record


@console_view(Role.OPERATOR)
def unknown_calls(request: HttpRequest, tenant: Tenant) -> HttpResponse:
    return render(
        request,
        "console/unknown.html",
        _context(request, tenant, records=selectors.unknown_calls(tenant)),
    )


@console_view(Role.OPERATOR)
def unknown_detail(request: HttpRequest, tenant: Tenant, pk: int) -> HttpResponse:
    record = _get_unknown_for_user(tenant, pk)
    return render(
        request,
        "console/unknown_detail.html",
        _context(request, tenant, record=record, **selectors.record_timeline(record)),
    )


@console_view(Role.OPERATOR, methods=("POST",))
def unknown_action(request: HttpRequest, tenant: Tenant, pk: int) -> HttpResponse:
    """Look up now, mark succeeded (evidence required), mark did-not-happen, or escalate."""
    record = _get_unknown_for_user(tenant, pk)
    action = request.POST.get("action", "")
    note = request.POST.get("note", "").strip()
    actor = request.user.get_username()
    try:
        if action == "lookup":
            reconcile_services.request_lookup(record=record, actor=actor)
            messages.success(request, _("A look-up was queued."))
        elif action == "succeeded":
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
            messages.success(request, _("Marked succeeded; duplicates now get this result."))
        elif action == "failed":
            if not note:
                raise InvalidInput(_("Say how you know it did not happen."))
            resolve_unknown(
                record=record,
                outcome=Outcome.FAILED,
                actor=actor,
                source="console",
                detail=note,
                error={"code": "NOT_EXECUTED", "message": note},
            )
            messages.success(
                request, _("Marked as not happened; a retry with the same key may run it.")
            )
        elif action == "escalate":
            reconcile_services.escalate(record=record, actor=actor, reason=note)
            messages.success(request, _("Escalated."))
        else:
            raise InvalidInput(_("Unknown action."))
    except LedgerError as exc:
        messages.error(request, exc.message)
        return redirect("console:unknown_call", pk=record.pk)
    return redirect("console:unknown_calls")


@console_view(Role.MANAGER)
def combinations_page(request: HttpRequest, tenant: Tenant) -> HttpResponse:
    """Active, canary and previous combinations side by side, with their metrics."""
    window = 60 * 24
    summaries = metrics.by_combination(tenant, since=metrics.window_start(window))
    rows = [
        (combination, summaries.get(combination.pk, metrics.Summary()))
        for combination in VersionCombination.objects.filter(tenant=tenant).order_by(
            "state", "-activated_at", "pk"
        )
    ]
    return render(
        request,
        "console/combinations.html",
        _context(request, tenant, rows=rows, window_hours=window // 60),
    )


def _get_combination_for_user(tenant: Tenant, pk: int) -> VersionCombination:
    combination = VersionCombination.objects.filter(tenant=tenant, pk=pk).first()
    if combination is None:
        raise Http404("No such combination.")
    return combination


@console_view(Role.MANAGER, methods=("GET", "POST"))
def rollback_page(request: HttpRequest, tenant: Tenant, pk: int) -> HttpResponse:
    """GET: what a rollback would do (a dry run). POST: do it, then show the report."""
    combination = _get_combination_for_user(tenant, pk)
    actor = request.user.get_username()
    reason = request.POST.get("reason", "").strip()
    try:
        if request.method == "POST":
            if not reason:
                raise InvalidInput(_("A rollback needs a reason."))
            report = combinations.rollback(
                tenant=tenant,
                combination_id=combination.pk,
                actor=actor,
                source="console",
                reason=reason,
            )
        else:
            report = combinations.rollback(
                tenant=tenant,
                combination_id=combination.pk,
                actor=actor,
                source="console",
                reason="preview",
                dry_run=True,
            )
    except LedgerError as exc:
        messages.error(request, exc.message)
        return redirect("console:combinations")
    return render(
        request,
        "console/rollback.html",
        _context(request, tenant, combination=combination, report=report),
    )


@console_view(Role.MANAGER, methods=("POST",))
def combination_action(request: HttpRequest, tenant: Tenant, pk: int) -> HttpResponse:
    """Halt a combination, or set its canary share."""
    combination = _get_combination_for_user(tenant, pk)
    actor = request.user.get_username()
    try:
        if request.POST.get("action") == "halt":
            combinations.halt(
                tenant=tenant,
                combination_id=combination.pk,
                actor=actor,
                source="console",
                reason=request.POST.get("reason", ""),
            )
            messages.success(request, _("Halted: new runs and calls under it are refused."))
        elif request.POST.get("action") == "canary":
            try:
                share = int(request.POST.get("share_bp", ""))
            except ValueError:
                raise InvalidInput(
                    _("The canary share is a whole number of basis points.")
                ) from None
            combinations.set_canary(
                tenant=tenant,
                combination_id=combination.pk,
                share_bp=share,
                actor=actor,
                source="console",
            )
            messages.success(request, _("Canary share saved."))
        else:
            raise InvalidInput(_("Unknown action."))
    except LedgerError as exc:
        messages.error(request, exc.message)
    return redirect("console:combinations")


@console_view(Role.MANAGER, Role.OPERATOR, Role.APPROVER)
def audit_log(request: HttpRequest, tenant: Tenant) -> HttpResponse:
    """Every human and system action of this tenant, newest first, filterable, keyset-paged."""
    events = AuditEvent.objects.filter(tenant=tenant)
    filters = {name: request.GET.get(name, "").strip() for name in ("actor", "action", "outcome")}
    if filters["actor"]:
        events = events.filter(actor__icontains=filters["actor"])
    if filters["action"]:
        events = events.filter(action__startswith=filters["action"])
    if filters["outcome"] in ("success", "denied"):
        events = events.filter(outcome=filters["outcome"])
    before = request.GET.get("before", "")
    if before.isdigit():
        events = events.filter(pk__lt=int(before))
    page = list(events.order_by("-pk")[: PAGE_SIZE + 1])
    more = len(page) > PAGE_SIZE
    page = page[:PAGE_SIZE]
    return render(
        request,
        "console/audit.html",
        _context(
            request,
            tenant,
            events=page,
            filters=filters,
            next_before=page[-1].pk if more and page else None,
        ),
    )


@console_view(Role.OPERATOR, Role.MANAGER, Role.APPROVER)
def tools_page(request: HttpRequest, tenant: Tenant) -> HttpResponse:
    """The registry: every tool's classification with its reason and rule."""
    tools = Tool.objects.filter(tenant=tenant).select_related("server").order_by("name")[:500]
    return render(
        request,
        "console/tools.html",
        _context(
            request,
            tenant,
            tools=tools,
            can_edit=has_role(request.user, Role.MANAGER),
            idempotency_choices=[i.value for i in Idempotency],
        ),
    )


@console_view(Role.MANAGER, methods=("POST",))
def tool_override(request: HttpRequest, tenant: Tenant, pk: int) -> HttpResponse:
    """Set or clear a human override of a tool's classification (a reason is required)."""
    tool = Tool.objects.filter(tenant=tenant, pk=pk).first()
    if tool is None:
        raise Http404("No such tool.")
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


@console_view(Role.MANAGER, methods=("GET", "POST"))
def metrics_page(request: HttpRequest, tenant: Tenant) -> HttpResponse:
    """Dedup hit rate, uncertain results and duplicate side effects over time per combination,
    and the thresholds that guard them (POST adds one)."""
    if request.method == "POST":
        try:
            thresholds.add_threshold(
                tenant=tenant,
                actor=request.user.get_username(),
                source="console",
                metric=Threshold.Metric(request.POST.get("metric", "")).value,
                above=float(request.POST.get("above", "")),
                window_minutes=int(request.POST.get("window_minutes", "15")),
                action=Threshold.Action(request.POST.get("action", "alert")).value,
                email=request.POST.get("email", "").strip(),
            )
            messages.success(request, _("Threshold added."))
        except (ValueError, LedgerError):
            messages.error(request, _("A threshold needs a metric, a number and a window."))
        return redirect("console:metrics")
    since = metrics.window_start(24 * 60)
    combos = list(VersionCombination.objects.filter(tenant=tenant).order_by("pk"))
    per_combo = {
        c.label: {
            p["bucket_start"]: p for p in metrics.series(tenant, since=since, combination_id=c.pk)
        }
        for c in combos
    }
    buckets = sorted({b for points in per_combo.values() for b in points})
    labels = [b.strftime("%H:%M") for b in buckets]

    def values(field: str) -> dict[str, list[float]]:
        return {
            label: [float(points[b][field]) if b in points else 0.0 for b in buckets]
            for label, points in per_combo.items()
        }

    charts = [
        charts_mod.line_chart(_("Dedup hit rate"), labels, values("dedup_hit_rate")),
        charts_mod.line_chart(_("Calls that became uncertain"), labels, values("became_uncertain")),
        charts_mod.line_chart(
            _("Duplicate side effects"), labels, values("duplicate_side_effects")
        ),
    ]
    return render(
        request,
        "console/metrics.html",
        _context(
            request,
            tenant,
            charts=charts,
            thresholds=Threshold.objects.filter(tenant=tenant).order_by("pk"),
            alerts=tenant.alerts.select_related("combination").order_by("-created_at")[:20],
            metric_choices=Threshold.Metric.choices,
        ),
    )
