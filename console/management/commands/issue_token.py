"""``manage.py issue_token TENANT NAME (--user USERNAME | --service-account ACCOUNT) [--scope S]``:
create an API token owned by a person or a service account, and print it once."""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import transaction

from ledger.models import ApiToken, Membership, ServiceAccount, Tenant
from ledger.permissions import RUNTIME_SCOPES, Scope
from ledger.services.audit import audit


class Command(BaseCommand):
    help = (
        "Issue an API token for a tenant, owned by a member of it (--user) or by a service "
        "account (--service-account, created if missing). The token is shown once; only its "
        "hash is stored. The owner can never approve what the token requests."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("tenant", help="the tenant's slug")
        parser.add_argument("name", help="a name for the token, e.g. the agent runtime using it")
        owner = parser.add_mutually_exclusive_group(required=True)
        owner.add_argument("--user", help="the person who owns it: a member of the tenant")
        owner.add_argument(
            "--service-account",
            help="the service account that owns it (created if missing); its requests always "
            "need a human approver",
        )
        parser.add_argument(
            "--scope",
            action="append",
            choices=Scope.values,
            help="what the token may do (repeat for several). A service account's token "
            f"defaults to running agents ({', '.join(sorted(RUNTIME_SCOPES))}) and can never "
            "decide approvals; a person's token defaults to whatever their role allows",
        )
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
            if options["service_account"] is not None:
                account = options["service_account"].strip()
                if not account:
                    raise CommandError("the service account needs a name")
                try:
                    owner = ServiceAccount.named(tenant=tenant, name=account).user
                except ValueError as exc:
                    raise CommandError(str(exc)) from None
            else:
                owner = self._member(tenant, options["user"])
            try:
                token, plaintext = ApiToken.issue(
                    tenant=tenant, name=name, user=owner, scopes=options["scope"]
                )
            except ValueError as exc:
                raise CommandError(str(exc)) from None
            audit(
                tenant=tenant,
                actor="cli",
                action="token.issued",
                target=token,
                source="cli",
                after={
                    "name": name,
                    "prefix": token.prefix,
                    "user": owner.get_username(),
                    "scopes": token.scopes,
                },
            )
        self.stdout.write(plaintext)

    @staticmethod
    def _member(tenant: Tenant, username: str) -> Any:
        user = get_user_model().objects.filter(username=username, is_active=True).first()
        if user is None:
            raise CommandError(f"no active user {username!r}")
        if not Membership.objects.filter(user=user, tenant=tenant).exists():
            raise CommandError(f"{username!r} is not a member of tenant {tenant.slug!r}")
        return user
