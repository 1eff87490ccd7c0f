"""A combination's lifecycle from the console (docs/rollout.md): each change (halt, resume,
retire, promote, canary share, shadow, out of shadow) is a page that says what it will change,
with a form that asks for a reason; the POST does it through the one service function that
owns the change and returns, with a message saying what it did (redirect after POST).

A change the combination's state does not allow is not offered (``actions_for``); asked for
anyway, the page says why, in the user's language, and changes nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.utils.functional import Promise
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy, ngettext

from console.access import console_view, get_for_tenant
from console.navigation import context_for
from console.templatetags.terms import term
from ledger import combinations
from ledger.errors import LedgerError
from ledger.models import Run, Tenant, VersionCombination
from ledger.permissions import Role
from ledger.services import approvals

State = VersionCombination.State


@dataclass(frozen=True)
class Change:
    """One lifecycle change the console offers: its URL name, the service action that owns
    it (``combinations.ACTION_FROM``), its menu label and whether it takes a share."""

    name: str
    service_action: str
    label: Promise
    confirm: Promise
    takes_share: bool = False
    danger: bool = False


CHANGES = {
    change.name: change
    for change in (
        Change(
            "promote", "activate", gettext_lazy("Promote to active…"), gettext_lazy("Make active")
        ),
        Change("resume", "resume", gettext_lazy("Resume…"), gettext_lazy("Resume")),
        Change(
            "canary",
            "canary",
            gettext_lazy("Make a canary…"),
            gettext_lazy("Save the canary share"),
            takes_share=True,
        ),
        Change(
            "shadow",
            "shadow",
            gettext_lazy("Put in shadow…"),
            gettext_lazy("Save the shadow share"),
            takes_share=True,
        ),
        Change(
            "unshadow",
            "unshadow",
            gettext_lazy("Take out of shadow…"),
            gettext_lazy("Take out of shadow"),
        ),
        Change("halt", "halt", gettext_lazy("Halt…"), gettext_lazy("Halt now"), danger=True),
        Change("retire", "retire", gettext_lazy("Retire…"), gettext_lazy("Retire"), danger=True),
    )
}


@dataclass(frozen=True)
class Offered:
    """A change as a menu shows it for one combination."""

    url_name: str
    label: str
    danger: bool


def actions_for(combination: VersionCombination) -> list[Offered]:
    """The changes the combination's state allows, in menu order, then its rollback."""
    offered = []
    share_labels = {"canary": _("Canary share…"), "shadow": _("Shadow share…")}
    for change in CHANGES.values():
        if combinations.changes_share(change.service_action, combination):
            label = share_labels[change.name]
            offered.append(Offered(f"console:combination_{change.name}", label, False))
            continue
        if not combinations.may(change.service_action, combination):
            continue
        label = str(change.label)
        if change.name == "promote" and combination.state != State.CANARY:
            label = _("Make active…")
        offered.append(Offered(f"console:combination_{change.name}", label, change.danger))
    if combinations.may("rollback", combination):
        offered.append(Offered("console:rollback", _("Roll back…"), True))
    return offered


def _refusal(change: Change, combination: VersionCombination) -> str:
    """Why ``change`` does not apply to the combination's state: the ledger's refusal, which
    says what to do instead (a stored text: the page shows it in the user's language); empty
    when it applies."""
    if combinations.changes_share(change.service_action, combination):
        return ""
    return combinations.refusal(combination, change.service_action)


def _plan_refusal(change: Change, preview: dict[str, Any]) -> str:
    """Why a resume or a retirement cannot be done now, in the user's language."""
    plan = preview.get("plan")
    if plan is None or not plan.refused:
        return ""
    if change.name == "resume":
        return _(
            "Its share of %(share)s no longer fits: the other canaries take %(others)s of new "
            "runs. Lower one of their shares first."
        ) % {"share": _percent(plan.share_bp), "others": _percent(preview["other_canaries"])}
    return _(
        "New runs of this tenant fail closed on %(label)s (it is halted and no other "
        "combination is active): restore or activate another combination first."
    ) % {"label": plan.combination.label}


def _preview(tenant: Tenant, change: Change, combination: VersionCombination) -> dict[str, Any]:
    """What the change will do, read now (it changes nothing)."""
    active = (
        VersionCombination.objects.filter(tenant=tenant, state=State.ACTIVE)
        .exclude(pk=combination.pk)
        .first()
    )
    runs = Run.in_flight(combination)
    preview: dict[str, Any] = {
        "active": active,
        "runs": list(runs.order_by("pk")[:100]),
        "run_count": runs.count(),
    }
    if change.name == "halt":
        preview["approvals"] = list(
            approvals.voided_by_halt(combination.pk).select_related("record__tool", "entry__run")
        )
        preview["fails_closed"] = combination.state == State.ACTIVE
    elif change.name == "resume" and combination.state == State.HALTED:
        plan = combinations.plan_resume(tenant=tenant, combination_id=combination.pk)
        preview["plan"] = plan
        preview["plan_words"] = _state_words(plan.state, plan.share_bp)
    elif change.name == "retire" and combinations.may("retire", combination):
        preview["plan"] = combinations.plan_retire(tenant=tenant, combination_id=combination.pk)
    elif change.name == "unshadow":
        preview["back_to"] = _state_words(
            combination.shadowed_from or State.NEW, combination.shadowed_from_share_bp
        )
    if change.name in ("canary", "shadow", "resume", "unshadow"):
        preview["other_canaries"] = sum(
            VersionCombination.objects.filter(tenant=tenant, state=State.CANARY)
            .exclude(pk=combination.pk)
            .values_list("canary_share_bp", flat=True)
        )
    return preview


def _share(data: Any, change: Change, combination: VersionCombination) -> tuple[str, int | None]:
    """The share the form names (as typed, and in basis points when it is a whole number)."""
    if change.name == "canary":
        default = combination.canary_share_bp if combination.state == State.CANARY else 1000
    else:
        default = combination.canary_share_bp if combination.state == State.SHADOW else 10_000
    typed = str(data.get("share_bp", default)).strip()
    try:
        return typed, int(typed)
    except ValueError:
        return typed, None


def _do(
    request: HttpRequest, tenant: Tenant, change: Change, combination: VersionCombination
) -> str:
    """Make the change; the message that says what it did."""
    reason = request.POST.get("reason", "").strip()
    if not reason:
        raise _FormError(_("Say why: the reason is kept in the audit log."))
    ids: dict[str, Any] = {
        "tenant": tenant,
        "combination_id": combination.pk,
        "actor": request.user.get_username(),
        "source": "console",
    }
    label = combination.label
    if change.name == "halt":
        result = combinations.halt(**ids, reason=reason)
        if not result.newly:
            return _("%(label)s was already halted.") % {"label": label}
        voided = ngettext(
            "%(n)d approval invalidated",
            "%(n)d approvals invalidated",
            len(result.invalidated_approvals),
        ) % {"n": len(result.invalidated_approvals)}
        runs = ngettext(
            "%(n)d run in flight is refused its next call",
            "%(n)d runs in flight are refused their next calls",
            len(result.runs_in_flight),
        ) % {"n": len(result.runs_in_flight)}
        return _(
            "Halted %(label)s: new runs and calls under it are refused; %(approvals)s; %(runs)s."
        ) % {
            "label": label,
            "approvals": voided,
            "runs": runs,
        }
    if change.name == "resume":
        plan = combinations.resume(**ids, reason=reason)
        return _resumed(plan)
    if change.name == "retire":
        retired = combinations.retire(**ids, reason=reason)
        if retired.halts_runs and retired.runs_in_flight:
            return ngettext(
                "Retired %(label)s: no new run goes to it; its %(n)d run in flight is halted.",
                "Retired %(label)s: no new run goes to it; its %(n)d runs in flight are halted.",
                len(retired.runs_in_flight),
            ) % {"label": label, "n": len(retired.runs_in_flight)}
        return _("Retired %(label)s: no new run goes to it.") % {"label": label}
    if change.name == "promote":
        replaced = (
            VersionCombination.objects.filter(tenant=tenant, state=State.ACTIVE)
            .exclude(pk=combination.pk)
            .first()
        )
        combinations.activate(**ids, reason=reason)
        if replaced is None:
            return _("%(label)s is active.") % {"label": label}
        return _("%(label)s is active; %(old)s, which it replaces, is retired.") % {
            "label": label,
            "old": replaced.label,
        }
    if change.name == "unshadow":
        back = combinations.unshadow(**ids, reason=reason)
        return _("Out of shadow: %(label)s is %(state)s again.") % {
            "label": label,
            "state": _state_words(back.state, back.canary_share_bp),
        }
    _typed, share = _share(request.POST, change, combination)
    if share is None:
        raise _FormError(_("A share is a whole number of basis points."))
    if change.name == "canary":
        combinations.set_canary(**ids, share_bp=share, reason=reason)
        return _("%(label)s is a canary: %(percent)s of new runs go to it.") % {
            "label": label,
            "percent": _percent(share),
        }
    combinations.set_shadow(**ids, share_bp=share, reason=reason)
    return _(
        "%(label)s is in shadow: %(percent)s of live runs are mirrored into it, with no side "
        "effect."
    ) % {"label": label, "percent": _percent(share)}


def _percent(share_bp: int) -> str:
    return f"{share_bp / 100:g}%"


def _state_words(state: str, share_bp: int) -> str:
    """A state as a phrase, with its share where it has one."""
    if state == State.CANARY:
        return _("a canary at %(percent)s of new runs") % {"percent": _percent(share_bp)}
    if state == State.SHADOW:
        return _("in shadow, mirroring %(percent)s of live runs") % {"percent": _percent(share_bp)}
    return term(state)


def _resumed(plan: combinations.ResumePlan) -> str:
    label = plan.combination.label
    if plan.state == State.ACTIVE and plan.replaces is not None:
        return _(
            "Resumed %(label)s: it is active again; %(old)s, active until now, is retired."
        ) % {
            "label": label,
            "old": plan.replaces.label,
        }
    return _("Resumed %(label)s: it is %(state)s again.") % {
        "label": label,
        "state": _state_words(plan.state, plan.share_bp),
    }


class _FormError(Exception):
    """A form the console refuses before asking a service (no reason, a share not a number)."""


@console_view(Role.MANAGER, methods=("GET", "POST"), target="versioncombination")
def combination_change(request: HttpRequest, tenant: Tenant, pk: int, change: str) -> HttpResponse:
    """GET: what the change will do, and a form for its reason. POST: do it, then back to the
    combination (or the list it was asked from) with what it did; on an error, the page again
    with the error and what was typed."""
    combination = get_for_tenant(
        request,
        tenant,
        VersionCombination.objects.select_related("previous"),
        pk,
        "No such combination.",
    )
    chosen = CHANGES[change]
    back = "list" if (request.POST.get("back") or request.GET.get("back")) == "list" else ""
    preview = _preview(tenant, chosen, combination)
    not_applicable = _refusal(chosen, combination)
    refused = not_applicable or _plan_refusal(chosen, preview)
    error, status = refused, 200
    if request.method == "POST" and refused:
        status = 409
    elif request.method == "POST":
        try:
            messages.success(request, _do(request, tenant, chosen, combination))
        except _FormError as exc:
            error, status = str(exc), 400
        except LedgerError as exc:  # e.g. someone else changed it meanwhile
            error, status = exc.message, 409 if exc.http_status == 409 else 400
        else:
            if back == "list":
                return redirect("console:combinations")
            return redirect("console:combination", pk=combination.pk)
        combination.refresh_from_db()
        preview = _preview(tenant, chosen, combination)
        not_applicable = _refusal(chosen, combination)
        refused = not_applicable or _plan_refusal(chosen, preview)
    typed_share, _bp = _share(request.POST or request.GET, chosen, combination)
    return render(
        request,
        "console/combination_change.html",
        context_for(
            request,
            tenant,
            combination=combination,
            change=chosen,
            error=error,
            refused=bool(refused),
            applies=not not_applicable,
            reason=request.POST.get("reason", ""),
            share_bp=typed_share,
            back=back,
            state_words=_state_words(combination.state, combination.canary_share_bp),
            **preview,
        ),
        status=status,
    )
