"""``manage.py issue_token TENANT NAME``: create an API token and print it once."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import transaction

from ledger.models import ApiToken, Tenant
from ledger.services.audit import audit


class Command(BaseCommand):
    help = "Issue an API token for a tenant. The token is shown once; only its hash is stored."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("tenant", help="the tenant's slug")
        parser.add_argument("name", help="a name for the token, e.g. the agent runtime using it")
        parser.add_argument(
            "--create-tenant", action="store_true", help="create the tenant if it does not exist"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        slug, name = options["tenant"], options["name"].strip()
        if not name:
            raise CommandError("the token needs a name")
        with transaction.atomic():
            tenant = Tenant.objects.filter(slug=slug).first()
            if tenant is None:
                if not options["create_tenant"]:
                    raise CommandError(f"no tenant {slug!r} (use --create-tenant to create it)")
                tenant = Tenant.objects.create(slug=slug, name=slug)
            token, plaintext = ApiToken.issue(tenant=tenant, name=name)
            audit(
                tenant=tenant,
                actor="cli",
                action="token.issued",
                target=token,
                source="cli",
                after={"name": name, "prefix": token.prefix},
            )
        self.stdout.write(plaintext)
