"""Compensations on the console (docs/compensation.md): one action's, or a whole run's (a saga).
Each page previews the exact calls; operators and approvers request, approvers decide with a
reason (never their own request: the approvals rule), and a worker runs what was approved."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.models import AbstractBaseUser
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.utils.translation import gettext as _

from console.access import console_view, get_for_tenant
from console.navigation import context_for
from ledger.errors import LedgerError
from ledger.models import (
    ApprovalRequest,
    AuditEvent,
    Compensation,
    IdempotencyRecord,
    Run,
    Tenant,
)
from ledger.permissions import Role
from ledger.services import approvals
from ledger.services.compensations import compensation_record, compensation_view
from reconcile import compensation_requests, compensations


def _get_record_for_user(request: HttpRequest, tenant: Tenant, pk: int) -> IdempotencyRecord:
    records = IdempotencyRecord.objects.select_related("tool", "run")
    return get_for_tenant(request, tenant, records, pk, "No such action.")


def _get_run_for_user(request: HttpRequest, tenant: Tenant, pk: int) -> Run:
    return get_for_tenant(request, tenant, Run.objects.all(), pk, "No such run.")


def _user(request: HttpRequest) -> AbstractBaseUser:
    assert isinstance(request.user, AbstractBaseUser)  # console_view signed them in
    return request.user


@console_view(Role.OPERATOR, Role.APPROVER, target="idempotencyrecord")
def record_compensation(request: HttpRequest, tenant: Tenant, pk: int) -> HttpResponse:
    """One action's compensation: the exact call, its state, and the request and decision."""
    record = _get_record_for_user(request, tenant, pk)
    compensation = Compensation.objects.filter(original=record).first()
    preview, problem = None, ""
    try:
        preview = compensations.preview(record=record)
    except LedgerError as exc:
        problem = exc.message
    approval = compensations.pending_approval(compensation) if compensation else None
    shown = compensations.shown_states([compensation])[compensation.pk] if compensation else None
    own_record = compensation_record(compensation) if compensation else None
    decided = (
        ApprovalRequest.objects.filter(record=own_record, decided_by__isnull=False)
        .select_related("decided_by")
        .order_by("-pk")
        .first()
        if own_record is not None
        else None
    )
    return render(
        request,
        "console/compensation.html",
        context_for(
            request,
            tenant,
            record=record,
            compensation=compensation,
            preview=preview,
            problem=problem,
            link=compensation_view(record),
            shown=shown,
            approval=approval,
            decided=decided,
            own=approval is not None
            and approvals.refusal_of_decider(approval, _user(request)) is not None,
        ),
    )


@console_view(Role.OPERATOR, Role.APPROVER, methods=("POST",), target="idempotencyrecord")
def record_compensation_request(request: HttpRequest, tenant: Tenant, pk: int) -> HttpResponse:
    record = _get_record_for_user(request, tenant, pk)
    try:
        compensation_requests.request_compensation(
            record=record,
            actor=_user(request).get_username(),
            requester_id=_user(request).pk,
            source=AuditEvent.Source.CONSOLE,
            reason=request.POST.get("reason", ""),
        )
    except LedgerError as exc:
        messages.error(request, exc.message)
    else:
        messages.success(request, _("Compensation requested; an approver decides it."))
    return redirect("console:record_compensation", pk=record.pk)


@console_view(Role.APPROVER, methods=("POST",), target="idempotencyrecord")
def record_compensation_decide(request: HttpRequest, tenant: Tenant, pk: int) -> HttpResponse:
    record = _get_record_for_user(request, tenant, pk)
    compensation = Compensation.objects.filter(original=record).first()
    approve = request.POST.get("decision") == "approve"
    try:
        if compensation is None:
            raise LedgerError(_("No compensation was requested for this action."))
        compensation_requests.decide_compensation(
            compensation=compensation,
            user=_user(request),
            approve=approve,
            reason=request.POST.get("reason", "").strip(),
        )
    except approvals.DeciderRefused as exc:
        raise PermissionDenied(exc.message) from None  # audited by decide
    except LedgerError as exc:
        messages.error(request, exc.message)
    else:
        messages.success(request, _("Approved; a worker runs it.") if approve else _("Rejected."))
    return redirect("console:record_compensation", pk=record.pk)


@console_view(Role.OPERATOR, Role.APPROVER, target="run")
def run_compensation(request: HttpRequest, tenant: Tenant, pk: int) -> HttpResponse:
    """A run compensated as a whole: every step, newest first, with its state."""
    run = _get_run_for_user(request, tenant, pk)
    steps = compensations.saga_plan(run)
    shown = compensations.shown_states([s.compensation for s in steps if s.compensation])
    waiting = compensations.waiting_approvals(compensations.saga_compensations(run))
    return render(
        request,
        "console/run_compensation.html",
        context_for(
            request,
            tenant,
            run=run,
            steps=[(s, shown[s.compensation.pk] if s.compensation else s.state) for s in steps],
            requestable=any(step.preview for step in steps),
            waiting=len(waiting),
            own=any(approvals.refusal_of_decider(a, _user(request)) for a in waiting),
        ),
    )


@console_view(Role.OPERATOR, Role.APPROVER, methods=("POST",), target="run")
def run_compensation_request(request: HttpRequest, tenant: Tenant, pk: int) -> HttpResponse:
    run = _get_run_for_user(request, tenant, pk)
    try:
        requested = compensation_requests.request_saga(
            run=run,
            actor=_user(request).get_username(),
            requester_id=_user(request).pk,
            source=AuditEvent.Source.CONSOLE,
        )
    except LedgerError as exc:
        messages.error(request, exc.message)
    else:
        messages.success(
            request,
            _("%(n)d compensations requested; an approver decides them.") % {"n": len(requested)},
        )
    return redirect("console:run_compensation", pk=run.pk)


@console_view(Role.APPROVER, methods=("POST",), target="run")
def run_compensation_decide(request: HttpRequest, tenant: Tenant, pk: int) -> HttpResponse:
    run = _get_run_for_user(request, tenant, pk)
    approve = request.POST.get("decision") == "approve"
    try:
        decided = compensation_requests.decide_saga(
            run=run,
            user=_user(request),
            approve=approve,
            reason=request.POST.get("reason", "").strip(),
        )
    except approvals.DeciderRefused as exc:
        raise PermissionDenied(exc.message) from None  # audited by decide
    except LedgerError as exc:
        messages.error(request, exc.message)
    else:
        done = _("%(n)d approved; a worker runs them newest first.") if approve else None
        messages.success(request, (done or _("%(n)d rejected.")) % {"n": decided})
    return redirect("console:run_compensation", pk=run.pk)
