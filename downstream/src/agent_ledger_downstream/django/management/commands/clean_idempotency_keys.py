from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from agent_ledger_downstream.django.views import delete_expired


class Command(BaseCommand):
    help = "Delete stored Idempotency-Key responses older than the retention, in batches."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--batch-size", type=int, default=1000)
        parser.add_argument("--max-batches", type=int, default=100)
        parser.add_argument(
            "--retention-hours",
            type=float,
            default=None,
            help="At least 24; defaults to the AGENT_LEDGER_DOWNSTREAM_RETENTION setting (7 days).",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        hours = options["retention_hours"]
        try:
            deleted = delete_expired(
                retention=timedelta(hours=hours) if hours is not None else None,
                batch_size=options["batch_size"],
                max_batches=options["max_batches"],
            )
        except ValueError as exc:
            raise CommandError(str(exc)) from exc
        self.stdout.write(f"deleted {deleted} stored responses")
