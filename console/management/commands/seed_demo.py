"""``manage.py seed_demo``: a demo tenant, accounts and registry for ``make run``.

Idempotent: running it again changes nothing that is already there. The demo accounts are for a
local machine only and the command refuses to run with DEBUG off.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError
from django.db import transaction

from console.demo import DEMO_PASSWORD, DEMO_USERS
from console.models import Membership
from ledger.classification.catalogue import CATALOGUE
from ledger.models import Tenant
from ledger.services.registry import ensure_catalogue_tool


class Command(BaseCommand):
    help = "Create the demo tenant, users and tool registry (DEBUG only)."

    def handle(self, *args: Any, **options: Any) -> None:
        if not settings.DEBUG:
            raise CommandError("seed_demo creates accounts with a known password: DEBUG only.")
        with transaction.atomic():
            tenant, _ = Tenant.objects.get_or_create(slug="demo", defaults={"name": "Demo Co"})
            for name in [*CATALOGUE, "run_command"]:
                ensure_catalogue_tool(tenant=tenant, name=name, actor="seed_demo", source="cli")
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
