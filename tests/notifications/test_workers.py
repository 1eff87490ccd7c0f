"""On-call notifications end to end: concurrent sweeps, a real ``celery worker`` on the
"notify" queue, a real HTTP receiver and a real SMTP server."""

from __future__ import annotations

import threading
import time
from datetime import timedelta
from pathlib import Path

import pytest
from django.db import connections
from django.db.models.functions import Now

from ledger import notifications
from ledger.models import AuditEvent, IdempotencyRecord, Notification
from ledger.records import Outcome, complete_execution
from reconcile.tasks import sweep_notifications
from tests.factories import make_tenant, make_tool, reserve
from tests.notifications.conftest import SmtpReceiver, WebhookReceiver
from tests.processes import RedisServer, celery_worker

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def sweep_concurrently(threads: int = 8, rounds: int = 5) -> None:
    """What several beat schedulers and workers racing each other would do."""
    start = threading.Barrier(threads)
    errors: list[BaseException] = []

    def sweeper() -> None:
        try:
            start.wait()
            for _ in range(rounds):
                sweep_notifications()
        except BaseException as exc:
            errors.append(exc)
        finally:
            connections.close_all()

    workers = [threading.Thread(target=sweeper) for _ in range(threads)]
    for thread in workers:
        thread.start()
    for thread in workers:
        thread.join()
    assert errors == []


def settle(condition, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out waiting"
        time.sleep(0.2)


def test_an_unknown_charge_past_each_sla_is_announced_once_per_tier(
    settings,
    broker: RedisServer,
    tmp_path: Path,
    webhook_receiver: WebhookReceiver,
    smtp_receiver: SmtpReceiver,
) -> None:
    settings.LEDGER_OUTBOUND_ALLOW_PRIVATE = True
    tenant = make_tenant("acme")
    charge = make_tool(tenant, "charge_customer")
    for kind, target, tier in [
        ("webhook", f"{webhook_receiver.url}/tier1", 1),
        ("email", "oncall@example.com", 1),
        ("webhook", f"{webhook_receiver.url}/tier2", 2),
    ]:
        notifications.add_channel(
            tenant=tenant,
            actor="m",
            source="console",
            role="operator",
            tier=tier,
            kind=kind,
            target=target,
        )
    record = reserve(tenant, charge, key="agent:acme:u1:run-1:charge_customer:inv-7").record
    complete_execution(record=record, fencing_token=1, outcome=Outcome.UNCERTAIN, actor="runtime")
    unknown = IdempotencyRecord.objects.filter(pk=record.pk)
    unknown.update(uncertain_since=Now() - timedelta(minutes=20))  # the default SLAs: 15, 60
    worker_env = {
        "LEDGER_OUTBOUND_ALLOW_PRIVATE": "true",
        "EMAIL_BACKEND": "django.core.mail.backends.smtp.EmailBackend",
        "EMAIL_HOST": smtp_receiver.host,
        "EMAIL_PORT": str(smtp_receiver.port),
    }
    with celery_worker("notify1", broker.url, tmp_path, queues="notify", env=worker_env):
        sweep_concurrently()
        settle(lambda: len(webhook_receiver.posts("/tier1")) == 1 and smtp_receiver.messages)
        [payload] = webhook_receiver.posts("/tier1")
        assert payload["tool"] == "charge_customer" and payload["tier"] == 1
        [mail] = smtp_receiver.messages
        assert mail["To"] == "oncall@example.com" and "charge_customer" in mail.get_payload()
        assert webhook_receiver.posts("/tier2") == []

        unknown.update(uncertain_since=Now() - timedelta(minutes=61))
        sweep_concurrently()
        settle(lambda: len(webhook_receiver.posts("/tier2")) == 1)

        sweep_concurrently()
        settle(lambda: not Notification.objects.exclude(state="delivered").exists(), timeout=10)
        time.sleep(1)  # anything more the worker had would have arrived by now
    assert len(webhook_receiver.posts("/tier1")) == 1
    assert len(webhook_receiver.posts("/tier2")) == 1
    assert len(smtp_receiver.messages) == 1
    assert Notification.objects.filter(state="delivered").count() == 3
    assert AuditEvent.objects.filter(action="notification.delivered").count() == 3
