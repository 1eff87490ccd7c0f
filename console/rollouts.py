"""Rollout plans in the console (managers): their progress, each step's analysis, and the
managers' actions (start a plan; pause, resume, skip a step, abort, each with a reason).

Every action is a real ``<form method="post">`` answered with a redirect (POST/redirect/GET),
so the pages work without JavaScript.
"""

from __future__ import annotations

from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.utils.translation import gettext as _

from console.access import console_view, get_for_tenant
from console.params import parse_id
from console.views import context_for
from ledger.combinations import rollouts
from ledger.errors import InvalidInput, LedgerError
from ledger.models import RolloutPlan, Tenant, VersionCombination
from ledger.permissions import Role

PAGE_SIZE = 50


def _candidates(tenant: Tenant) -> list[VersionCombination]:
    return list(
        VersionCombination.objects.filter(
            tenant=tenant, state__in=rollouts.CANDIDATE_STATES
        ).order_by("-pk")[:100]
    )


#: What the form to start a rollout holds until the manager types something else.
FORM_DEFAULTS = {
    "candidate": "",
    "shares": "shadow, 5, 25, 50, 100",
    "min_minutes": "15",
    "min_samples": "50",
}


@console_view(Role.MANAGER, export=False)
def rollout_plans(request: HttpRequest, tenant: Tenant) -> HttpResponse:
    """The tenant's plans, newest first, with the step each is at."""
    return _plans_page(request, tenant)


def _plans_page(
    request: HttpRequest, tenant: Tenant, *, typed: dict[str, str] | None = None, error: str = ""
) -> HttpResponse:
    """The plans and the form to start one: after an error, the error beside what was typed."""
    plans = list(
        RolloutPlan.objects.filter(tenant=tenant)
        .select_related("candidate")
        .prefetch_related("steps")
        .order_by("-pk")[:PAGE_SIZE]
    )
    form = {**FORM_DEFAULTS, **{k: v for k, v in (typed or {}).items() if k in FORM_DEFAULTS}}
    return render(
        request,
        "console/rollouts.html",
        context_for(
            request, tenant, plans=plans, candidates=_candidates(tenant), form=form, error=error
        ),
        status=400 if error else 200,
    )


def _steps_from(form: dict[str, str]) -> list[rollouts.StepSpec]:
    """Steps from the form: shares in percent ("shadow" or 0 for a shadow step), one minimum
    duration and sample size for every step but the last."""
    try:
        minutes = int(form.get("min_minutes", "0") or 0)
        samples = int(form.get("min_samples", "0") or 0)
        shares = [
            0 if part.strip().lower() == "shadow" else round(float(part) * 100)
            for part in form.get("shares", "").split(",")
            if part.strip()
        ]
    except ValueError:
        raise InvalidInput(
            _("Shares are percentages separated by commas; minutes and samples whole numbers.")
        ) from None
    return [rollouts.StepSpec(share, minutes, samples) for share in shares]


@console_view(Role.MANAGER, methods=("POST",))
def rollout_create(request: HttpRequest, tenant: Tenant) -> HttpResponse:
    candidate = parse_id(request.POST.get("candidate", ""))
    try:
        if candidate is None:
            raise InvalidInput(_("Choose a candidate combination."))
        plan = rollouts.create_plan(
            tenant=tenant,
            candidate_id=candidate,
            steps=_steps_from(request.POST.dict()),
            actor=request.user.get_username(),
            source="console",
        )
    except LedgerError as exc:
        return _plans_page(request, tenant, typed=request.POST.dict(), error=exc.message)
    messages.success(request, _("Rollout started at its first step."))
    return redirect("console:rollout", pk=plan.pk)


def _get_plan_for_user(request: HttpRequest, tenant: Tenant, pk: int) -> RolloutPlan:
    plans = RolloutPlan.objects.select_related("candidate")
    return get_for_tenant(request, tenant, plans, pk, "No such rollout plan.")


@console_view(Role.MANAGER, target="rolloutplan")
def rollout_detail(request: HttpRequest, tenant: Tenant, pk: int) -> HttpResponse:
    """A plan's progress, step by step, with the analysis each step was judged by."""
    plan = _get_plan_for_user(request, tenant, pk)
    return render(
        request,
        "console/rollout_detail.html",
        context_for(request, tenant, plan=plan, steps=list(plan.steps.all())),
    )


@console_view(Role.MANAGER, methods=("POST",), target="rolloutplan")
def rollout_action(request: HttpRequest, tenant: Tenant, pk: int) -> HttpResponse:
    plan = _get_plan_for_user(request, tenant, pk)
    action = request.POST.get("action", "")
    try:
        rollouts.act_on_plan(
            tenant=tenant,
            plan_id=plan.pk,
            action=action,
            actor=request.user.get_username(),
            source="console",
            reason=request.POST.get("reason", ""),
        )
    except LedgerError as exc:
        messages.error(request, exc.message)
    else:
        messages.success(request, _("Done; the audit log has it with your reason."))
    return redirect("console:rollout", pk=plan.pk)
