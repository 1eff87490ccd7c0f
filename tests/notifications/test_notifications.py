"""On-call notifications in one process: what is due, to whom, and how a delivery is retried,
audited and kept free of secrets. Webhooks go to a real HTTP receiver; e-mail to Django's
outbox. (tests/notifications/test_workers.py runs them through real Celery workers.)"""

from __future__ import annotations

import logging
from datetime import timedelta

import pytest
from django.db.models.functions import Now

from ledger import combinations, notifications
from ledger.errors import InvalidInput
from ledger.models import (
    AlertEvent,
    ApprovalRequest,
    AuditEvent,
    IdempotencyRecord,
    Notification,
    NotificationChannel,
    OnCallPolicy,
    Tenant,
    Threshold,
    Tool,
    VersionCombination,
)
from ledger.records import Outcome, complete_execution
from ledger.services.approvals import decide
from tests.console.conftest import make_pending, make_user
from tests.factories import make_tenant, make_tool, reserve
from tests.notifications.conftest import WebhookReceiver

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _loopback_receivers(settings) -> None:
    """The receivers listen on loopback, which the outbound allow-list refuses by default."""
    settings.LEDGER_OUTBOUND_ALLOW_PRIVATE = True


@pytest.fixture
def charge(tenant: Tenant) -> Tool:
    return make_tool(tenant, "charge_customer")


def unknown_for(
    tenant: Tenant, tool: Tool, minutes: int, key: str = "charge-1"
) -> IdempotencyRecord:
    """A record whose outcome has been unknown for ``minutes`` by the database's clock."""
    record = reserve(tenant, tool, key=key).record
    complete_execution(record=record, fencing_token=1, outcome=Outcome.UNCERTAIN, actor="runtime")
    IdempotencyRecord.objects.filter(pk=record.pk).update(
        uncertain_since=Now() - timedelta(minutes=minutes)
    )
    return record


def channel(tenant: Tenant, kind: str, target: str, *, tier: int = 1, role: str = "operator"):
    return notifications.add_channel(
        tenant=tenant,
        actor="manager",
        source="console",
        role=role,
        tier=tier,
        kind=kind,
        target=target,
    )


def run_sweep() -> list[str]:
    """One sweep and the deliveries it enqueues, as the tasks do them."""
    return [notifications.deliver(pk) for pk in notifications.sweep(batch_size=100)]


@pytest.fixture
def on_call(tenant: Tenant, webhook_receiver: WebhookReceiver) -> WebhookReceiver:
    """Operators: tier 1 by webhook and e-mail, tier 2 by a Slack-compatible webhook."""
    channel(tenant, "webhook", f"{webhook_receiver.url}/tier1")
    channel(tenant, "email", "oncall@example.com")
    channel(tenant, "slack", f"{webhook_receiver.url}/tier2", tier=2)
    return webhook_receiver


def test_an_unknown_call_past_the_first_sla_tells_tier_one_once(
    tenant, charge, on_call, mailoutbox
) -> None:
    record = unknown_for(tenant, charge, minutes=20)
    assert sorted(run_sweep()) == ["delivered", "delivered"]
    [payload] = on_call.posts("/tier1")
    assert payload["event"] == "sla_exceeded" and payload["tier"] == 1
    assert payload["tool"] == "charge_customer" and payload["subject"]["id"] == record.pk
    assert payload["waiting_minutes"] == 20
    [mail] = mailoutbox
    assert mail.to == ["oncall@example.com"] and "charge_customer" in mail.body
    assert on_call.posts("/tier2") == []
    assert run_sweep() == [] and len(on_call.posts("/tier1")) == 1 and len(mailoutbox) == 1


def test_past_the_second_sla_tier_two_hears_once(tenant, charge, on_call, mailoutbox) -> None:
    unknown_for(tenant, charge, minutes=61)
    run_sweep()
    [slack] = on_call.posts("/tier2")
    assert set(slack) == {"text"} and "tier 2" in slack["text"]
    assert len(on_call.posts("/tier1")) == 1 and len(mailoutbox) == 1
    assert run_sweep() == []


def test_a_recent_unknown_call_tells_nobody(tenant, charge, on_call, mailoutbox) -> None:
    unknown_for(tenant, charge, minutes=5)
    assert run_sweep() == []
    assert on_call.received == [] and mailoutbox == []


def test_the_tenants_service_levels_decide(tenant, charge, on_call) -> None:
    notifications.set_policy(
        tenant=tenant,
        actor="m",
        source="console",
        first_sla_minutes=2,
        second_sla_minutes=4,
        expiry_warning_minutes=5,
    )
    unknown_for(tenant, charge, minutes=3)
    run_sweep()
    assert len(on_call.posts("/tier1")) == 1 and on_call.posts("/tier2") == []


def test_service_levels_in_the_wrong_order_are_refused_and_change_nothing(tenant) -> None:
    with pytest.raises(InvalidInput, match="longer than the first"):
        notifications.set_policy(
            tenant=tenant,
            actor="m",
            source="console",
            first_sla_minutes=30,
            second_sla_minutes=30,
            expiry_warning_minutes=5,
        )
    assert not OnCallPolicy.objects.exists()
    assert not AuditEvent.objects.filter(action="on_call_policy.updated").exists()


def test_an_escalated_unknown_call_is_announced(tenant, charge, on_call) -> None:
    record = unknown_for(tenant, charge, minutes=1)
    IdempotencyRecord.objects.filter(pk=record.pk).update(
        escalated_at=Now(), escalation_reason="the look-up failed 5 times"
    )
    run_sweep()
    [payload] = on_call.posts("/tier1")
    assert payload["event"] == "unknown_escalated" and "failed 5 times" in payload["text"]


def test_a_halted_combination_goes_to_managers_not_operators(tenant, on_call) -> None:
    channel(tenant, "webhook", f"{on_call.url}/managers", role="manager")
    combo = VersionCombination.objects.create(
        tenant=tenant,
        label="v2",
        model="m",
        prompt="p",
        rules="r",
        tool_schema="s",
        data_version="d",
        fingerprint="a" * 64,
        state="active",
    )
    combinations.halt(
        tenant=tenant,
        combination_id=combo.pk,
        actor="m",
        source="console",
        reason="duplicates seen",
    )
    run_sweep()
    [payload] = on_call.posts("/managers")
    assert payload["event"] == "combination_halted" and "duplicates seen" in payload["text"]
    assert on_call.posts("/tier1") == []


def test_another_tenants_channels_hear_nothing(tenant, charge, webhook_receiver) -> None:
    other = make_tenant("globex")
    channel(other, "webhook", f"{webhook_receiver.url}/globex")
    unknown_for(tenant, charge, minutes=90)
    assert run_sweep() == []
    assert webhook_receiver.received == []


def test_a_failed_webhook_is_retried_after_its_back_off_and_each_try_audited(
    tenant, charge, webhook_receiver
) -> None:
    channel(tenant, "webhook", f"{webhook_receiver.url}/tier1")
    webhook_receiver.fail_next = 1
    unknown_for(tenant, charge, minutes=20)
    assert run_sweep() == ["retry"]
    notification = Notification.objects.get()
    assert notification.state == "pending" and notification.attempts == 1
    assert "HTTP 500" in notification.last_error
    # Not yet due (the back-off is by the database's clock): a redelivered message is skipped.
    assert notifications.deliver(notification.pk) == "skipped"
    assert run_sweep() == []
    Notification.objects.filter(pk=notification.pk).update(next_attempt_at=Now())
    assert run_sweep() == ["delivered"]
    assert len(webhook_receiver.posts("/tier1")) == 1
    actions = list(
        AuditEvent.objects.filter(target_type="notification")
        .order_by("pk")
        .values_list("action", flat=True)
    )
    assert actions == ["notification.failed", "notification.delivered"]


def test_a_delivery_is_abandoned_after_the_last_attempt(
    tenant, charge, webhook_receiver, settings
) -> None:
    settings.LEDGER_NOTIFY_MAX_ATTEMPTS = 2
    channel(tenant, "webhook", f"{webhook_receiver.url}/tier1")
    webhook_receiver.fail_next = 5
    unknown_for(tenant, charge, minutes=20)
    assert run_sweep() == ["retry"]
    Notification.objects.update(next_attempt_at=Now())
    assert run_sweep() == ["failed"]
    assert Notification.objects.get().state == "failed"
    assert AuditEvent.objects.filter(action="notification.abandoned").count() == 1
    Notification.objects.update(next_attempt_at=Now())
    assert run_sweep() == []


def test_an_item_settled_before_delivery_is_not_sent(tenant, charge, webhook_receiver) -> None:
    channel(tenant, "webhook", f"{webhook_receiver.url}/tier1")
    record = unknown_for(tenant, charge, minutes=20)
    [pk] = notifications.sweep(batch_size=10)
    IdempotencyRecord.objects.filter(pk=record.pk).update(state="failed_final", expires_at=Now())
    assert notifications.deliver(pk) == "skipped"
    assert webhook_receiver.received == []


def test_a_webhook_url_with_a_token_is_never_logged_or_audited(
    tenant, charge, webhook_receiver, caplog
) -> None:
    channel(tenant, "slack", f"{webhook_receiver.url}/services/T0/B0/s3cr3t-token")
    webhook_receiver.fail_next = 1
    unknown_for(tenant, charge, minutes=20)
    with caplog.at_level(logging.DEBUG):
        run_sweep()
        Notification.objects.update(next_attempt_at=Now())
        run_sweep()
    assert len(webhook_receiver.posts("/services/T0/B0/s3cr3t-token")) == 1
    assert "s3cr3t" not in caplog.text
    for event in AuditEvent.objects.all():
        assert "s3cr3t" not in f"{event.before} {event.after} {event.detail} {event.target_id}"


def test_a_webhook_to_a_private_address_is_refused_and_nothing_saved(tenant, settings) -> None:
    settings.LEDGER_OUTBOUND_ALLOW_PRIVATE = False
    with pytest.raises(InvalidInput, match="non-public address"):
        channel(tenant, "webhook", "http://127.0.0.1:9/hook")
    with pytest.raises(InvalidInput, match="e-mail address"):
        channel(tenant, "email", "not an address")
    with pytest.raises(InvalidInput, match="tier: 1 or 2"):
        channel(tenant, "email", "a@example.com", tier=3)
    assert not NotificationChannel.objects.exists()
    assert not AuditEvent.objects.filter(action="notification_channel.created").exists()


def test_a_webhook_whose_host_became_private_is_refused_at_delivery(
    tenant, charge, webhook_receiver, settings
) -> None:
    channel(tenant, "webhook", f"{webhook_receiver.url}/tier1")
    settings.LEDGER_OUTBOUND_ALLOW_PRIVATE = False  # checked again when it is sent
    unknown_for(tenant, charge, minutes=20)
    assert run_sweep() == ["retry"]
    assert "refused" in Notification.objects.get().last_error
    assert webhook_receiver.received == []


@pytest.fixture
def approvers(tenant, webhook_receiver: WebhookReceiver) -> WebhookReceiver:
    channel(tenant, "webhook", f"{webhook_receiver.url}/approvers", role="approver")
    channel(tenant, "webhook", f"{webhook_receiver.url}/approvers2", role="approver", tier=2)
    return webhook_receiver


def events(receiver: WebhookReceiver, path: str) -> list[str]:
    return sorted(payload["event"] for payload in receiver.posts(path))


def test_an_approval_is_announced_then_escalated_past_each_sla(tenant, approvers) -> None:
    approval = make_pending(tenant)
    run_sweep()
    [payload] = approvers.posts("/approvers")
    assert payload["event"] == "approval_requested" and payload["subject"]["id"] == approval.pk
    assert payload["console_path"] == f"/approvals/{approval.pk}/"
    ApprovalRequest.objects.filter(pk=approval.pk).update(created_at=Now() - timedelta(minutes=20))
    run_sweep()
    assert events(approvers, "/approvers") == ["approval_requested", "sla_exceeded"]
    assert approvers.posts("/approvers2") == []
    ApprovalRequest.objects.filter(pk=approval.pk).update(created_at=Now() - timedelta(minutes=61))
    run_sweep()
    assert events(approvers, "/approvers2") == ["sla_exceeded"]
    assert run_sweep() == []


def test_an_approval_about_to_expire_is_announced(tenant, approvers) -> None:
    approval = make_pending(tenant)
    ApprovalRequest.objects.filter(pk=approval.pk).update(expires_at=Now() + timedelta(minutes=5))
    run_sweep()
    assert events(approvers, "/approvers") == ["approval_expiring", "approval_requested"]
    [expiring] = [p for p in approvers.posts("/approvers") if p["event"] == "approval_expiring"]
    assert "expires in" in expiring["text"]


def test_a_decided_approval_is_not_announced(tenant, approvers, django_user_model) -> None:
    approval = make_pending(tenant)
    [pk] = notifications.sweep(batch_size=10)
    decide(
        approval=approval,
        user=make_user(django_user_model, "ann", tenant, "approver"),
        approve=False,
        reason="not now",
    )
    assert notifications.deliver(pk) == "skipped"
    assert approvers.received == []


def test_a_threshold_alert_reaches_the_managers_channels(tenant, webhook_receiver) -> None:
    combo = VersionCombination.objects.create(
        tenant=tenant,
        label="v3",
        model="m",
        prompt="p",
        rules="r",
        tool_schema="s",
        data_version="d",
        fingerprint="b" * 64,
        state="active",
    )
    threshold = Threshold.objects.create(tenant=tenant, metric="duplicate_side_effects", above=0)
    old = AlertEvent.objects.create(
        tenant=tenant,
        threshold=threshold,
        combination=combo,
        metric="duplicate_side_effects",
        observed=1,
        action="alert",
    )
    AlertEvent.objects.filter(pk=old.pk).update(created_at=Now() - timedelta(days=1))
    channel(tenant, "webhook", f"{webhook_receiver.url}/managers", role="manager")
    alert = AlertEvent.objects.create(
        tenant=tenant,
        threshold=threshold,
        combination=combo,
        metric="duplicate_side_effects",
        observed=2,
        action="alert",
    )
    assert run_sweep() == ["delivered"]  # the alert from before the channel is not news
    [payload] = webhook_receiver.posts("/managers")
    assert payload["event"] == "threshold_crossed" and payload["subject"]["id"] == alert.pk
    assert payload["combination"] == "v3" and payload["observed"] == 2
    assert run_sweep() == []
