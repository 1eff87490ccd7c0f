"""``manage.py seed_demo``: a demo tenant, accounts and registry for ``make run``.

It also tells the workers how to reconcile the demo's calls: each sandbox service the demo
agent calls is the downstream adapter of its tool (looked up by key at ``--sandbox-url``), and
the sandbox's workspace is the ``demo`` workspace root, so the file checks can read it. And it
sets up one compensation, so a new user sees one run: ``create_order`` is undone by
``cancel_order`` (the sandbox's ``POST /orders/objects/{id}/cancel``, its cancellation looked up
by key), as a manager would on the Tools page. And it guards the demo as seed 001 asks: a
threshold on uncertain results and one on duplicate side effects, whose alerts, with every
notification of what waits on a human, go to the demo's on-call address (``make run`` writes
the e-mails to ``var/demo-mail/``), so the regression the demo's candidate brings is announced.

Idempotent: running it again changes nothing that is already there (an adapter's URL follows
``--sandbox-url``). The demo accounts are for a local machine only and the command refuses to
run with DEBUG off.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import transaction

from console.demo import DEMO_PASSWORD, DEMO_USERS
from ledger import notifications
from ledger.classification.catalogue import CATALOGUE
from ledger.combinations import thresholds
from ledger.domain import Idempotency
from ledger.models import (
    DeclaredCompensation,
    Membership,
    NotificationChannel,
    Tenant,
    Threshold,
    Tool,
    WorkspaceRoot,
)
from ledger.services.registry import ensure_catalogue_tool, register_tool
from reconcile.compensations import declare_compensation
from reconcile.models import CompensationAdapter, DownstreamAdapter

#: The sandbox service each of the demo's side-effecting tools calls (demo_agent).
DEMO_DOWNSTREAMS = {"create_order": "orders", "charge_customer": "payments", "send_email": "email"}
#: Where the demo's alerts and notifications go, for every role.
ON_CALL = "on-call@demo.example"
#: The demo's thresholds, alerting: its candidate's calls that became uncertain cross the first
#: within the hour of history before the demo (17 in that hour against the baseline's 2; with
#: make run's own traffic about 29 against 10, so the baseline stays below); any duplicate side
#: effect crosses the second.
DEMO_THRESHOLDS = [
    {"metric": Threshold.Metric.UNCERTAIN_RESULTS, "above": 12, "window_minutes": 60},
    {"metric": Threshold.Metric.DUPLICATE_SIDE_EFFECTS, "above": 0, "window_minutes": 60},
]
#: A sandbox's "not found" settles a demo call this long after it went unknown: long enough
#: for a slow create to land, short enough that the demo's calls settle within a minute.
DEMO_GRACE_SECONDS = 15


def demo_workspace() -> str:
    """Where the demo agent's sandbox keeps the files it writes (the ``demo`` workspace)."""
    return str((settings.VAR_DIR / "workspaces" / "demo").resolve())


class Command(BaseCommand):
    help = "Create the demo tenant, users and tool registry (DEBUG only)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--sandbox-url",
            default="http://127.0.0.1:8025",
            help="the sandbox the demo agent calls (python -m sandbox), looked up by the workers",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        if not settings.DEBUG:
            raise CommandError("seed_demo creates accounts with a known password: DEBUG only.")
        sandbox = options["sandbox_url"].rstrip("/")
        if urlsplit(sandbox).scheme not in ("http", "https"):
            raise CommandError(f"--sandbox-url must be an http(s) URL, not {sandbox!r}")
        with transaction.atomic():
            tenant, _ = Tenant.objects.get_or_create(slug="demo", defaults={"name": "Demo Co"})
            tools = {
                name: ensure_catalogue_tool(
                    tenant=tenant, name=name, actor="seed_demo", source="cli"
                )
                for name in [*CATALOGUE, "run_command"]
            }
            for name, service in DEMO_DOWNSTREAMS.items():
                DownstreamAdapter.objects.update_or_create(
                    tool=tools[name],
                    defaults={
                        "tenant": tenant,
                        "kind": DownstreamAdapter.Kind.HTTP,
                        "url_template": f"{sandbox}/{service}/objects/by-key/{{key}}",
                        "found_statuses": [200],
                        "not_found_statuses": [404],
                        "grace_seconds": DEMO_GRACE_SECONDS,
                    },
                )
            _set_up_cancel_order(tenant, tools["create_order"], sandbox)
            _set_up_on_call(tenant)
            WorkspaceRoot.objects.update_or_create(
                tenant=tenant, name="demo", defaults={"path": demo_workspace()}
            )
            user_model = get_user_model()
            for username in DEMO_USERS:
                user = user_model.objects.filter(username=username).first()
                if user is None:
                    user = user_model.objects.create_user(
                        username=username,
                        password=DEMO_PASSWORD,
                        is_staff=username == "admin",
                        is_superuser=username == "admin",
                    )
                Membership.objects.update_or_create(  # each has the role of its name
                    user=user, tenant=tenant, defaults={"role": username}
                )
        self.stdout.write(f"Demo ready: users {', '.join(DEMO_USERS)} / {DEMO_PASSWORD}")


def _set_up_cancel_order(tenant: Tenant, create_order: Tool, sandbox: str) -> None:
    """``cancel_order`` undoes ``create_order``: its adapters follow ``sandbox``, and the
    declaration is made once (audited), never changed by seeding again. The URLs are written
    as they are: the worker checks each against the outbound allow-list when it sends it."""
    cancel = Tool.objects.filter(tenant=tenant, name="cancel_order").first() or register_tool(
        tenant=tenant,
        name="cancel_order",
        actor="seed_demo",
        source="cli",
        declared_idempotency=Idempotency.NON_IDEMPOTENT,
        description="Cancel an order.",
    )
    CompensationAdapter.objects.update_or_create(
        tool=cancel,
        defaults={
            "tenant": tenant,
            "url_template": f"{sandbox}/orders/objects/{{order_id}}/cancel",
            "success_statuses": [200, 201],
        },
    )
    DownstreamAdapter.objects.update_or_create(
        tool=cancel,
        defaults={
            "tenant": tenant,
            "kind": DownstreamAdapter.Kind.HTTP,
            "url_template": f"{sandbox}/orders/cancellations/by-key/{{key}}",
            "found_statuses": [200],
            "not_found_statuses": [404],
            "grace_seconds": DEMO_GRACE_SECONDS,
        },
    )
    if not DeclaredCompensation.objects.filter(tool=create_order).exists():
        declare_compensation(
            tool=create_order,
            compensating_tool=cancel.name,
            arguments={"order_id": "result.id"},
            actor="seed_demo",
            source="cli",
        )


def _set_up_on_call(tenant: Tenant) -> None:
    """The demo's thresholds (each added once, audited, never changed by seeding again) and an
    e-mail channel per role, all to ``ON_CALL``."""
    for fields in DEMO_THRESHOLDS:
        if not Threshold.objects.filter(tenant=tenant, metric=fields["metric"]).exists():
            thresholds.add_threshold(
                tenant=tenant, actor="seed_demo", source="cli", email=ON_CALL, **fields
            )
    for role in NotificationChannel.Role.values:
        notifications.add_channel(
            tenant=tenant,
            actor="seed_demo",
            source="cli",
            role=role,
            tier=1,
            kind=NotificationChannel.Kind.EMAIL,
            target=ON_CALL,
        )
