"""``{{ value|term }}``: the ledger's identifiers (states, decisions, classes) as words in the
user's language. The identifiers themselves stay in the API and in ``title`` attributes."""

from __future__ import annotations

from functools import lru_cache

from django import template
from django.utils.html import format_html
from django.utils.translation import get_language
from django.utils.translation import gettext_lazy as _

from console import states
from ledger.models import ApprovalRequest, IdempotencyRecord
from ledger.stored_text import begins_with_name, translate

register = template.Library()

TERMS = {
    # idempotency records
    "reserved": _("reserved"),
    "executing": _("executing"),
    "succeeded": _("succeeded"),
    "failed_final": _("failed (did not happen)"),
    "unknown": _("unknown"),
    # ledger entries
    "planned": _("planned"),
    "approved": _("approved"),
    "started": _("started"),
    "failed": _("failed"),
    "uncertain": _("uncertain"),
    # decisions
    "execute": _("execute"),
    "recorded_result": _("recorded result"),
    "wait": _("wait"),
    "approval_required": _("approval required"),
    "forbidden": _("refused"),
    "conflict": _("conflict"),
    "shadow_dry_run": _("shadow dry run"),
    # classification
    "idempotent": _("idempotent"),
    "conditional": _("conditional"),
    "non_idempotent": _("non-idempotent"),
    "auto": _("replay automatically"),
    "ask": _("ask a human"),
    "never": _("never replay"),
    # approvals
    "pending": _("pending"),
    "rejected": _("rejected"),
    "consumed": _("used"),
    "invalidated": _("invalidated"),
    # a compensation (ledger.compensation.shown_state)
    "compensated": _("compensated"),
    "awaiting_approval": _("awaiting approval"),
    "approved_to_run": _("approved; a worker sends it"),
    "missing": _("missing"),
    "expired": _("expired"),
    "pending_approval": _("pending approval"),
    # combinations and runs
    "new": _("new"),
    "active": _("active"),
    "canary": _("canary"),
    "shadow": _("shadow"),
    "halted": _("halted"),
    "retired": _("retired"),
    "running": _("running"),
    "finished": _("finished"),
    # look-ups and file checks
    "found": _("found downstream"),
    "not_found": _("not found downstream"),
    "not_found_in_grace": _("not found yet (grace period)"),
    "unreachable": _("downstream unreachable"),
    "timeout": _("look-up timed out"),
    "malformed": _("malformed answer"),
    "already_applied": _("already applied"),
    "apply_again": _("apply again"),
    # thresholds
    "dedup_hit_rate": _("dedup hit rate"),
    "uncertain_share": _("executions that became uncertain"),
    "uncertain_results": _("uncertain results"),
    "duplicate_side_effects": _("duplicate side effects"),
    "alert": _("alert"),
    "halt": _("halt the combination"),
    # on-call notifications
    "approval_requested": _("approval requested"),
    "approval_expiring": _("approval about to expire"),
    "unknown_escalated": _("unknown call escalated"),
    "no_lookup": _("nothing can look it up"),
    "sla_exceeded": _("past the service level"),
    "combination_halted": _("combination halted"),
    "threshold_crossed": _("threshold crossed"),
    "sending": _("sending"),
    "delivered": _("delivered"),
    "operator": _("operator"),
    "approver": _("approver"),
    "worker": _("worker"),
    "runtime": _("runtime"),
    "manager": _("manager"),
    "email": _("e-mail"),
    "webhook": _("webhook (JSON)"),
    "slack": _("Slack-compatible webhook"),
    "approval": _("approval"),
    "record": _("call"),
    "combination": _("combination"),
    "admin": _("admin"),
    # shadow comparison and rollout analysis
    "intended": _("intended (dry run)"),
    "approvals": _("approvals asked"),
    "rejections": _("rejections"),
    "met": _("within the threshold"),
    "crossed": _("crossed"),
    "too_few_samples": _("too few samples"),
    "no_threshold": _("no threshold"),
    "advance": _("advance"),
    # what a rollout step still waits for
    "duration": _("its minimum time"),
    "samples": _("enough samples"),
    "threshold_samples": _("enough samples for a threshold's window"),
    "in_flight": _("calls still in flight"),
    "passed": _("passed"),
    "skipped": _("skipped"),
    "paused": _("paused"),
    "completed": _("completed"),
    "aborted": _("aborted"),
    "became_uncertain": _("became uncertain"),
    "keyed_requests": _("keyed requests"),
    "executions": _("executions"),
}


@register.filter
def term(value: object) -> str:
    return _term(str(value), get_language())


@lru_cache(maxsize=4096)
def _term(text: str, language: str | None) -> str:
    """One translation per identifier and language: a list shows a few terms on every row."""
    return str(TERMS.get(text, text.replace("_", " ")))


@register.filter
def said(value: object) -> str:
    """``{{ error|said }}``: an error shown to a person, in their language where it is a
    stored text, as a sentence: its first letter capital (unless it begins with a name, which
    is shown as written) and a full stop at its end. The services write their errors as
    clauses, which the API's problem documents carry as they are."""
    english = str(value).strip()
    text = translate(english)
    if not text:
        return text
    if not begins_with_name(english):
        text = text[0].upper() + text[1:]
    if text[-1].isascii() and (text[-1].isalnum() or text[-1] in ")'\"`"):
        text += "."
    return text


@register.filter
def stored(value: object) -> str:
    """``{{ value|stored }}``: a text the ledger stored in English (a reason, an audit
    detail), in the user's language when it is one of ``ledger.stored_text``'s templates."""
    return translate(str(value)) if value else ""


@register.simple_tag
def badge(subject: ApprovalRequest | IdempotencyRecord) -> str:
    """``{% badge approval %}``, ``{% badge record %}``: its state as it stands now, in one
    word with its tone (``console.states``), the reason in the title where there is one."""
    status = (
        states.approval_status(subject)
        if isinstance(subject, ApprovalRequest)
        else states.record_status(subject)
    )
    tone = f" {status.tone}" if status.tone else ""
    return format_html(
        '<span class="badge{}" title="{}">{}</span>', tone, stored(status.why), term(status.state)
    )


@register.filter
def signed(value: float) -> str:
    """A difference with its sign and one decimal (``+19.1``, ``-15.9``)."""
    return f"{value:+.1f}"
