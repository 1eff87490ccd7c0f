"""``seed_demo`` tells the workers how to reconcile the demo's calls: its side-effecting tools
are looked up in the sandbox, and its file writes are checked in the sandbox's workspace. It
also sets up one compensation, so that a new user sees one run: an order is cancelled in the
sandbox once an operator asked and an approver approved."""

from __future__ import annotations

from io import StringIO
from typing import Any

import httpx
import pytest
from django.contrib.auth import get_user_model
from django.core.management import CommandError, call_command
from django.test import override_settings

from console.management.commands.demo_agent import Command as DemoAgent
from console.management.commands.demo_agent import backfill_history
from console.management.commands.seed_demo import (
    DEMO_DOWNSTREAMS,
    DEMO_THRESHOLDS,
    ON_CALL,
    demo_workspace,
)
from ledger.clock import db_now
from ledger.combinations import thresholds
from ledger.models import (
    Compensation,
    IdempotencyRecord,
    NotificationChannel,
    Tenant,
    Threshold,
    WorkspaceRoot,
)
from reconcile.models import CompensationAdapter, DownstreamAdapter
from reconcile.tasks import run_compensations
from sandbox.server import SandboxServer
from tests.api.conftest import client_for
from tests.console.conftest import signed_in

pytestmark = pytest.mark.django_db

#: What looks each of the demo's compensations up (``cancel_order``'s cancellation, by key).
LOOKED_UP = {"cancel_order": "orders/cancellations"}


def test_the_demo_tools_are_looked_up_in_the_sandbox() -> None:
    with override_settings(DEBUG=True):
        call_command("seed_demo", sandbox_url="http://127.0.0.1:9999/")
    adapters = {
        a.tool.name: a.url_template
        for a in DownstreamAdapter.objects.select_related("tool").filter(tenant__slug="demo")
    }
    assert adapters == {
        **{
            tool: f"http://127.0.0.1:9999/{service}/objects/by-key/{{key}}"
            for tool, service in DEMO_DOWNSTREAMS.items()
        },
        **{
            tool: f"http://127.0.0.1:9999/{path}/by-key/{{key}}" for tool, path in LOOKED_UP.items()
        },
    }
    workspace = WorkspaceRoot.objects.get(tenant__slug="demo", name="demo")
    assert workspace.path == demo_workspace() and workspace.path.startswith("/")


def test_seeding_again_follows_the_sandbox_url_and_adds_nothing() -> None:
    with override_settings(DEBUG=True):
        call_command("seed_demo")
        call_command("seed_demo", sandbox_url="http://127.0.0.1:8100")
    assert DownstreamAdapter.objects.count() == len(DEMO_DOWNSTREAMS) + len(LOOKED_UP)
    assert CompensationAdapter.objects.count() == 1
    assert WorkspaceRoot.objects.count() == 1
    urls = set(DownstreamAdapter.objects.values_list("url_template", flat=True))
    urls |= set(CompensationAdapter.objects.values_list("url_template", flat=True))
    assert all(url.startswith("http://127.0.0.1:8100/") for url in urls)
    assert Threshold.objects.count() == len(DEMO_THRESHOLDS)
    assert NotificationChannel.objects.count() == len(NotificationChannel.Role.values)


def test_the_demos_candidate_is_announced_to_on_call_and_its_baseline_is_not(
    mailoutbox: Any, django_capture_on_commit_callbacks: Any
) -> None:
    """Over the day of history the demo starts with, its thresholds alert on the candidate's
    uncertain results, by e-mail to the on-call address, and say nothing of the baseline."""
    with override_settings(DEBUG=True):
        call_command("seed_demo")
    tenant = Tenant.objects.get(slug="demo")
    made = DemoAgent()._combinations(tenant)  # baseline active, candidate a canary
    backfill_history(tenant, made, until=db_now())
    with django_capture_on_commit_callbacks(execute=True):
        raised = thresholds.evaluate()
    assert [(a.combination.label, a.metric) for a in raised] == [("candidate", "uncertain_results")]
    assert [message.to for message in mailoutbox] == [[ON_CALL]]
    assert "candidate" in mailoutbox[0].body


def test_a_sandbox_url_that_is_not_http_is_refused_and_changes_nothing() -> None:
    with override_settings(DEBUG=True), pytest.raises(CommandError, match="http"):
        call_command("seed_demo", sandbox_url="file:///etc/passwd")
    assert not DownstreamAdapter.objects.exists()


def test_the_demo_cancels_an_order_once_an_operator_asked_and_an_approver_approved(
    sandbox: SandboxServer, settings: Any
) -> None:
    settings.LEDGER_OUTBOUND_ALLOW_PRIVATE = True  # the sandbox listens on 127.0.0.1
    with override_settings(DEBUG=True):
        call_command("seed_demo", sandbox_url=sandbox.url, stdout=StringIO())
    api = client_for(Tenant.objects.get(slug="demo"))
    api.start_run()
    call = api.call("create_order", {"cart": "c-1"}, business_object_id="c-1").json()
    order = httpx.post(
        f"{sandbox.url}/orders/objects",
        json={"reference": "c-1"},
        headers={"Idempotency-Key": call["idempotency_key"]},
    ).json()
    api.post(
        f"/calls/{call['call_id']}/complete",
        {"fencing_token": 1, "outcome": "succeeded", "result": order},
    )
    record = IdempotencyRecord.objects.get(key=call["idempotency_key"])
    users = get_user_model().objects
    operator = signed_in(users.get(username="operator"))
    assert (
        f"/compensations/records/{record.pk}/"
        in operator.get(f"/ledger/runs/{record.run_id}/").content.decode()
    )
    operator.post(f"/compensations/records/{record.pk}/request", {"reason": "a test order"})
    signed_in(users.get(username="approver")).post(
        f"/compensations/records/{record.pk}/decide",
        {"decision": "approve", "reason": "the customer asked"},
    )
    assert run_compensations([Compensation.objects.get().pk]) == ["succeeded"]
    stats = httpx.get(f"{sandbox.url}/orders/stats", timeout=5).json()
    assert stats["cancellations_per_object"] == {order["id"]: 1}
