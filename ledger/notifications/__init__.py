"""On-call notifications: telling people about what waits on them, and escalating.

What is due is read from the database's state, never from events held in memory: an approval
that is pending, an unknown call that a look-up escalated to a human, an approval or unknown call
older than the tenant's first service level (tier 1) or second (tier 2), an approval about to
expire, a halted combination, a metric threshold's alert. PostgreSQL is the source of truth, so
nothing is missed while Redis or a worker is down; the next sweep finds it.

The items and what a message about one says are in ``notification_items``. ``sweep`` inserts
one ``Notification`` per channel and item (``INSERT ... ON CONFLICT DO NOTHING`` against the
``notification_once_per_item_and_tier`` constraint, so sweeps may run concurrently) and returns
those due to be sent. ``deliver`` claims one with a conditional UPDATE, sends it outside any
transaction, and records the outcome and an audit event. Ages are by the database's clock
(``Now()`` in the deciding statement).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import Exists, F, OuterRef, Q, QuerySet
from django.db.models.functions import Now

from ledger.clock import backoff
from ledger.errors import InvalidInput, NotFound
from ledger.models import (
    AlertEvent,
    IdempotencyRecord,
    Notification,
    NotificationChannel,
    OnCallPolicy,
    Tenant,
    VersionCombination,
)
from ledger.notifications import senders
from ledger.notifications.items import compose, unknown_records, waiting_approvals
from ledger.services.audit import audit

logger = logging.getLogger(__name__)
Event = Notification.Event
Subject = Notification.Subject
Role = NotificationChannel.Role
Kind = NotificationChannel.Kind
MAX_SLA_MINUTES = 60 * 24 * 7


def _ago(minutes: int) -> Any:
    return Now() - timedelta(minutes=minutes)


@dataclass(frozen=True)
class Rule:
    """Which items are due for ``event`` at ``tier`` (given the tenant, its service levels and
    the channel), and whose channels hear of it."""

    event: str
    subject: str
    role: str
    tier: int
    due: Callable[[Tenant, OnCallPolicy, NotificationChannel], QuerySet[Any]]


#: The one table of what is announced to whom. Tier 2 hears only of items past the second
#: service level: that is the escalation.
RULES = (
    Rule(
        Event.APPROVAL_REQUESTED,
        Subject.APPROVAL,
        Role.APPROVER,
        1,
        lambda t, p, c: waiting_approvals(t),
    ),
    Rule(
        Event.APPROVAL_EXPIRING,
        Subject.APPROVAL,
        Role.APPROVER,
        1,
        lambda t, p, c: waiting_approvals(t).filter(
            expires_at__lte=Now() + timedelta(minutes=p.expiry_warning_minutes)
        ),
    ),
    Rule(
        Event.SLA_EXCEEDED,
        Subject.APPROVAL,
        Role.APPROVER,
        1,
        lambda t, p, c: waiting_approvals(t).filter(created_at__lte=_ago(p.first_sla_minutes)),
    ),
    Rule(
        Event.SLA_EXCEEDED,
        Subject.APPROVAL,
        Role.APPROVER,
        2,
        lambda t, p, c: waiting_approvals(t).filter(created_at__lte=_ago(p.second_sla_minutes)),
    ),
    Rule(
        Event.UNKNOWN_ESCALATED,
        Subject.RECORD,
        Role.OPERATOR,
        1,
        lambda t, p, c: unknown_records(t).filter(IdempotencyRecord.escalated_q()),
    ),
    Rule(
        Event.SLA_EXCEEDED,
        Subject.RECORD,
        Role.OPERATOR,
        1,
        lambda t, p, c: unknown_records(t).filter(uncertain_since__lte=_ago(p.first_sla_minutes)),
    ),
    Rule(
        Event.SLA_EXCEEDED,
        Subject.RECORD,
        Role.OPERATOR,
        2,
        lambda t, p, c: unknown_records(t).filter(uncertain_since__lte=_ago(p.second_sla_minutes)),
    ),
    Rule(
        Event.COMBINATION_HALTED,
        Subject.COMBINATION,
        Role.MANAGER,
        1,
        lambda t, p, c: VersionCombination.objects.filter(
            tenant=t, state=VersionCombination.State.HALTED
        ),
    ),
    # A metric threshold's alert also reaches the managers' channels (with retries and an
    # audit trail); alerts from before a channel existed are history, not news.
    Rule(
        Event.THRESHOLD_CROSSED,
        Subject.ALERT,
        Role.MANAGER,
        1,
        lambda t, p, c: AlertEvent.objects.filter(tenant=t, created_at__gte=c.created_at),
    ),
)


def policy_of(tenant: Tenant) -> OnCallPolicy:
    """The tenant's service levels (the defaults when it has set none)."""
    return OnCallPolicy.objects.filter(tenant=tenant).first() or OnCallPolicy(tenant=tenant)


# --- what managers edit ----------------------------------------------------------------------
def add_channel(
    *, tenant: Tenant, actor: str, source: str, role: str, tier: int, kind: str, target: str
) -> NotificationChannel:
    """Bad input is an ``InvalidInput`` naming the field, and nothing is saved. A webhook's URL
    must pass the outbound allow-list."""
    target = target.strip()
    problems = []
    if role not in Role.values:
        problems.append("role: one of " + ", ".join(Role.values))
    if tier not in (1, 2):
        problems.append("tier: 1 or 2")
    if kind not in Kind.values:
        problems.append("kind: one of " + ", ".join(Kind.values))
    elif problem := (
        senders.email_problem(target)
        if kind == Kind.EMAIL
        else senders.webhook_problem(target, max_length=500)
    ):
        problems.append(f"target: {problem}")
    if problems:
        raise InvalidInput(f"invalid notification channel ({'; '.join(problems)})")
    with transaction.atomic():
        channel, created = NotificationChannel.objects.get_or_create(
            tenant=tenant, role=role, tier=tier, kind=kind, target=target
        )
        if created:
            audit(
                tenant=tenant,
                actor=actor,
                action="notification_channel.created",
                target=channel,
                source=source,
                after={"role": role, "tier": tier, "kind": kind, "target": channel.masked_target},
            )
    return channel


def remove_channel(*, tenant: Tenant, actor: str, source: str, channel_id: int) -> None:
    """Remove one of the tenant's channels (its pending notifications go with it)."""
    with transaction.atomic():
        channel = (
            NotificationChannel.objects.select_for_update()
            .filter(tenant=tenant, pk=channel_id)
            .first()
        )
        if channel is None:
            raise NotFound(f"no notification channel {channel_id}")
        audit(
            tenant=tenant,
            actor=actor,
            action="notification_channel.removed",
            target=channel,
            source=source,
            before={
                "role": channel.role,
                "tier": channel.tier,
                "kind": channel.kind,
                "target": channel.masked_target,
            },
        )
        channel.delete()


def set_policy(
    *,
    tenant: Tenant,
    actor: str,
    source: str,
    first_sla_minutes: int,
    second_sla_minutes: int,
    expiry_warning_minutes: int,
) -> OnCallPolicy:
    """Set the tenant's service levels; the second must be longer than the first."""
    values = {
        "first_sla_minutes": first_sla_minutes,
        "second_sla_minutes": second_sla_minutes,
        "expiry_warning_minutes": expiry_warning_minutes,
    }
    problems = [
        f"{name}: 1 to {MAX_SLA_MINUTES}"
        for name, value in values.items()
        if not 1 <= value <= MAX_SLA_MINUTES
    ]
    if not problems and second_sla_minutes <= first_sla_minutes:
        problems.append("second_sla_minutes: longer than the first")
    if problems:
        raise InvalidInput(f"invalid service levels ({'; '.join(problems)})")
    with transaction.atomic():
        before = policy_of(tenant)
        policy, _ = OnCallPolicy.objects.update_or_create(tenant=tenant, defaults=values)
        audit(
            tenant=tenant,
            actor=actor,
            action="on_call_policy.updated",
            target=policy,
            source=source,
            before={name: getattr(before, name) for name in values},
            after=values,
        )
    return policy


# --- the sweep -------------------------------------------------------------------------------
#: A notification due to be sent: pending and due, or taken by a sender that died mid-delivery
#: (its claim lapsed, so the message goes again).
_DUE = Q(state=Notification.State.PENDING, next_attempt_at__lte=Now()) | Q(
    state=Notification.State.SENDING, claimed_until__lt=Now()
)


def sweep(*, batch_size: int) -> list[int]:
    """Create what is due (at most ``batch_size`` items per rule and channel) and return the
    ids of notifications due to be sent, oldest first."""
    created = 0
    tenant_ids = NotificationChannel.objects.values_list("tenant_id", flat=True).distinct()
    for tenant in Tenant.objects.filter(pk__in=list(tenant_ids)):
        created += _plan(tenant, batch_size)
    due = list(
        Notification.objects.filter(_DUE)
        .order_by("next_attempt_at", "pk")
        .values_list("pk", flat=True)[:batch_size]
    )
    logger.info("notification sweep", extra={"planned": created, "due": len(due)})
    return due


def _plan(tenant: Tenant, batch_size: int) -> int:
    policy = policy_of(tenant)
    channels = list(NotificationChannel.objects.filter(tenant=tenant))
    rows: list[Notification] = []
    for rule in RULES:
        for channel in channels:
            if (channel.role, channel.tier) != (rule.role, rule.tier):
                continue
            told = Notification.objects.filter(
                channel=channel,
                event=rule.event,
                subject_type=rule.subject,
                subject_id=OuterRef("pk"),
            )
            ids = (
                rule.due(tenant, policy, channel)
                .filter(~Exists(told))
                .order_by("pk")
                .values_list("pk", flat=True)[:batch_size]
            )
            rows.extend(
                Notification(
                    tenant=tenant,
                    channel=channel,
                    event=rule.event,
                    subject_type=rule.subject,
                    subject_id=subject_id,
                )
                for subject_id in ids
            )
    # A concurrent sweep may insert the same rows first: the constraint makes ours no-ops.
    Notification.objects.bulk_create(rows, ignore_conflicts=True)
    return len(rows)


# --- delivery --------------------------------------------------------------------------------
def deliver(notification_id: int) -> str:
    """Send one notification if it is due and nobody else is sending it: "delivered",
    "skipped" (not due, taken, or its item no longer waits), "retry" or "failed"."""
    claimed = Notification.objects.filter(_DUE, pk=notification_id).update(
        state=Notification.State.SENDING,
        attempts=F("attempts") + 1,
        claimed_until=Now() + timedelta(seconds=settings.LEDGER_NOTIFY_CLAIM_SECONDS),
    )
    if not claimed:
        return "skipped"
    notification = Notification.objects.select_related("channel", "tenant").get(pk=notification_id)
    message = compose(notification)
    if message is None:
        _finish(notification, Notification.State.FAILED, "its item no longer waits")
        return "skipped"
    channel = notification.channel
    try:  # slow I/O outside any transaction
        if channel.kind == Kind.EMAIL:
            answer = senders.send_email(channel.target, message.subject, message.text)
        elif channel.kind == Kind.SLACK:
            answer = senders.post_webhook(channel.target, senders.slack_payload(message.text))
        else:
            answer = senders.post_webhook(channel.target, message.payload)
    except senders.DeliveryFailed as exc:
        if notification.attempts >= settings.LEDGER_NOTIFY_MAX_ATTEMPTS:
            _finish(notification, Notification.State.FAILED, str(exc))
            return "failed"
        _finish(notification, Notification.State.PENDING, str(exc))
        return "retry"
    _finish(notification, Notification.State.DELIVERED, answer)
    return "delivered"


def retry_delay(attempts: int) -> timedelta:
    """Exponential back-off after ``attempts`` failed deliveries (capped at an hour)."""
    return backoff(attempts, base_seconds=settings.LEDGER_NOTIFY_RETRY_SECONDS, cap_seconds=3600)


def _finish(notification: Notification, state: str, outcome: str) -> None:
    """Record the outcome and its audit event in one transaction, if the claim still holds."""
    changes: dict[str, Any] = {"state": state, "claimed_until": None, "last_error": ""}
    if state == Notification.State.DELIVERED:
        changes["delivered_at"] = Now()
    else:
        changes["last_error"] = outcome[:300]
    if state == Notification.State.PENDING:
        changes["next_attempt_at"] = Now() + retry_delay(notification.attempts)
    with transaction.atomic():
        updated = Notification.objects.filter(
            pk=notification.pk, state=Notification.State.SENDING, attempts=notification.attempts
        ).update(**changes)
        if not updated:
            return  # the claim lapsed and another sender took over: its outcome counts
        action = {
            Notification.State.DELIVERED.value: "notification.delivered",
            Notification.State.PENDING.value: "notification.failed",
            Notification.State.FAILED.value: "notification.abandoned",
        }[state]
        audit(
            tenant=notification.tenant,
            actor="system",
            action=action,
            target=notification,
            source="worker",
            after={
                "event": notification.event,
                "subject": f"{notification.subject_type}:{notification.subject_id}",
                "channel": str(notification.channel),
                "attempt": notification.attempts,
            },
            detail=outcome,
        )
