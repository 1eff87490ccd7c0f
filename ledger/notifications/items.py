"""What an on-call notification is about: the items that wait on a human (approvals that can
still be given, unknown calls) and the message about one, composed when it is sent from the
item as it stands, or None once it no longer waits."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.conf import settings
from django.db.models import QuerySet
from django.utils.module_loading import import_string

from ledger.clock import db_now
from ledger.domain import RecordState
from ledger.models import (
    AlertEvent,
    ApprovalRequest,
    IdempotencyRecord,
    Notification,
    Tenant,
    VersionCombination,
)
from ledger.services.approvals import still_open

Event = Notification.Event
Subject = Notification.Subject


def waiting_approvals(tenant: Tenant) -> QuerySet[ApprovalRequest]:
    """The approvals that still wait for an approver: pending and still possible to give (an
    expired one, or one whose action settled, is no longer waiting, whatever its state)."""
    return still_open(ApprovalRequest.objects.filter(tenant=tenant))


def unknown_records(tenant: Tenant) -> QuerySet[IdempotencyRecord]:
    return IdempotencyRecord.objects.filter(tenant=tenant, state=RecordState.UNKNOWN)


@dataclass(frozen=True)
class Message:
    subject: str
    text: str
    payload: dict[str, Any]


def compose(notification: Notification) -> Message | None:
    """The message about the notification's item, or None if the item no longer waits."""
    now = db_now()
    tier = notification.channel.tier
    subject_type, subject_id = notification.subject_type, notification.subject_id
    path = link(subject_type, subject_id)
    facts: dict[str, Any] = {
        "event": notification.event,
        "tier": tier,
        "tenant": notification.tenant.slug,
        "subject": {"type": subject_type, "id": subject_id},
    }
    if subject_type == Subject.RECORD:
        records = unknown_records(notification.tenant).select_related("tool")
        record = records.filter(pk=subject_id).first()
        if record is None:
            return None
        since = record.uncertain_since or record.updated_at
        facts |= _waiting(
            record.tool.name,
            record.state,
            since,
            now,
            path,
        )
        what = f"{record.tool.name}: outcome unknown for {_minutes(now, since)} min"
        if notification.event == Event.UNKNOWN_ESCALATED:
            what += f", escalated to a human ({record.escalation_reason[:200]})"
    elif subject_type == Subject.APPROVAL:
        approvals = waiting_approvals(notification.tenant).select_related("record__tool")
        approval = approvals.filter(pk=subject_id).first()
        if approval is None:
            return None
        tool = approval.record.tool.name
        facts |= _waiting(
            tool,
            approval.state,
            approval.created_at,
            now,
            path,
        )
        facts["expires_at"] = approval.expires_at.isoformat()
        what = f"{tool}: approval waiting for {_minutes(now, approval.created_at)} min"
        if notification.event == Event.APPROVAL_EXPIRING:
            what = f"{tool}: approval expires in {max(0, -_minutes(now, approval.expires_at))} min"
    elif subject_type == Subject.ALERT:
        alert = (
            AlertEvent.objects.filter(tenant=notification.tenant, pk=subject_id)
            .select_related("threshold", "combination")
            .first()
        )
        if alert is None:
            return None
        facts.update(
            metric=alert.metric,
            observed=alert.observed,
            threshold=alert.threshold.above,
            action=alert.action,
            combination=alert.combination.label,
            console_path=path,
        )
        what = (
            f"{alert.metric} = {alert.observed:.4g} on combination {alert.combination.label} "
            f"crossed {alert.threshold.above:g}; action: {alert.action}"
        )
    else:
        combination = VersionCombination.objects.filter(
            tenant=notification.tenant, pk=subject_id, state=VersionCombination.State.HALTED
        ).first()
        if combination is None:
            return None
        facts.update(
            combination=combination.label,
            state=combination.state,
            console_path=path,
        )
        what = f"combination {combination.label} halted: {combination.halted_reason[:200]}"
    headline = {
        Event.APPROVAL_REQUESTED: "approval requested",
        Event.APPROVAL_EXPIRING: "approval about to expire",
        Event.SLA_EXCEEDED: f"past the tier {tier} service level",
        Event.UNKNOWN_ESCALATED: "unknown call escalated",
        Event.COMBINATION_HALTED: "combination halted",
        Event.THRESHOLD_CROSSED: "metric threshold crossed",
    }[Event(notification.event)]
    text = f"Agent Ledger ({notification.tenant.slug}), {headline}: {what}. {facts['console_path']}"
    return Message(subject=f"Agent Ledger: {headline}", text=text, payload={**facts, "text": text})


def link(subject_type: str, subject_id: int) -> str:
    """Where a person acts on the subject: the function ``LEDGER_NOTIFICATION_LINKS`` names
    (the console's pages, ``console.notification_links``) gives its path; without one, none."""
    name = getattr(settings, "LEDGER_NOTIFICATION_LINKS", "")
    return str(import_string(name)(subject_type, subject_id)) if name else ""


def _waiting(
    tool: str, state: str, since: datetime, now: datetime, console_path: str
) -> dict[str, Any]:
    """The facts of an item that waits for a human: whose, in what state, since when."""
    return {
        "tool": tool,
        "state": state,
        "waiting_since": since.isoformat(),
        "waiting_minutes": _minutes(now, since),
        "console_path": console_path,
    }


def _minutes(now: datetime, then: datetime) -> int:
    return int((now - then).total_seconds() // 60)
