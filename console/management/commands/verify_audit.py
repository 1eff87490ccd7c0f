"""``manage.py verify_audit``: check the audit log's hash chains (docs/runbook.md, "Verify the
audit log").

    verify_audit                        # every chain: each tenant's, and the events of none
    verify_audit --tenant SLUG          # one tenant's chain
    verify_audit --csv FILE             # the console's audit export, offline (no database)
    verify_audit --csv FILE --filtered  # an export filtered by actor, action or outcome

A chain in the database is walked by seq from its first event; an export from its first row,
whose ``prev_digest`` is taken as given (an export may be cut or a time range). Each prints
OK with the events it checked, their seqs and the last digest (the anchor to keep, and to
find again in a later export), or the first broken link: an edited event (its fields do not
hash to its digest), a deleted one (a seq missing), an inserted one (a seq twice, or a
``prev_digest`` that is not the digest before it). A chain's events not sealed yet though
older than ``--grace`` are a warning: the sealing task is behind or not running. Exits with
status 1 when a chain is broken.
"""

from __future__ import annotations

from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from console.audit_export import read_export
from ledger.audit_chain import Scope, Verdict, walk
from ledger.models import Tenant
from ledger.services.audit_sealing import unsealed_older_than, verify_chain

NO_TENANT = "(no tenant)"


class Command(BaseCommand):
    help = "Verify the audit log's hash chains, in the database or in a CSV export."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--tenant", metavar="SLUG", help="only this tenant's chain")
        parser.add_argument("--csv", metavar="FILE", help="verify an audit export offline")
        parser.add_argument(
            "--filtered",
            action="store_true",
            help="the export was filtered (actor, action, outcome): seqs it skips are not breaks",
        )
        parser.add_argument(
            "--grace",
            type=int,
            default=max(60, 3 * settings.LEDGER_AUDIT_SEAL_SECONDS),
            metavar="SECONDS",
            help="warn about events older than this that are not sealed yet",
        )

    def handle(self, *args: object, **options: object) -> None:
        csv_path, slug = options["csv"], options["tenant"]
        if csv_path and slug:
            raise CommandError("--csv verifies the file alone; --tenant is for the database")
        if options["filtered"] and not csv_path:
            raise CommandError("--filtered is for an export (--csv)")
        if csv_path:
            scope = Scope.SAMPLE if options["filtered"] else Scope.SPAN
            broken = not self._verify_export(Path(str(csv_path)), scope)
        else:
            grace = options["grace"]
            assert isinstance(grace, int)
            # Every chain is walked and reported, a broken one or not.
            verified = [self._verify_chain(tenant, grace=grace) for tenant in _chains(slug)]
            broken = not all(verified)
        if broken:
            raise CommandError("the audit log's hash chain is broken (see above)")

    def _verify_chain(self, tenant: Tenant | None, *, grace: int) -> bool:
        label = tenant.slug if tenant else NO_TENANT
        verdict = verify_chain(tenant)
        self._report(label, verdict)
        late = unsealed_older_than(tenant, seconds=grace)
        if late:
            self.stdout.write(
                self.style.WARNING(
                    f"{label}: warning: {late} event(s) older than {grace} s not sealed yet "
                    "(is the seal-audit-chains task running?)"
                )
            )
        return verdict.ok

    def _verify_export(self, path: Path, scope: Scope) -> bool:
        try:
            with path.open(newline="", encoding="utf-8-sig") as lines:
                export = read_export(lines)
        except OSError as exc:
            raise CommandError(f"cannot read {path}: {exc.strerror}") from None
        except (ValueError, UnicodeDecodeError) as exc:
            raise CommandError(f"{path}: {exc}") from None
        verdict = walk(export.links, scope=scope)
        self._report(str(path), verdict)
        notes = []
        if export.unsealed:
            notes.append(f"{export.unsealed} row(s) not sealed when exported, not checked")
        if export.cut:
            notes.append("the export was cut at its row limit")
        if verdict.first_seq and verdict.first_seq > 1:
            notes.append(f"seq {verdict.first_seq}'s prev_digest taken as given")
        if verdict.gaps:
            notes.append(f"{verdict.gaps} gap(s) in seq, left by the filters")
        for note in notes:
            self.stdout.write(f"{path}: {note}")
        return verdict.ok

    def _report(self, label: str, verdict: Verdict) -> None:
        if verdict.broken is not None:
            self.stdout.write(
                self.style.ERROR(
                    f"{label}: BROKEN, {verdict.broken.describe()} "
                    f"({verdict.checked} event(s) before it check out)"
                )
            )
        elif not verdict.checked:
            self.stdout.write(f"{label}: OK, no sealed events")
        else:
            self.stdout.write(
                self.style.SUCCESS(
                    f"{label}: OK, {verdict.checked} event(s), seq {verdict.first_seq} "
                    f"to {verdict.last_seq}, last digest {verdict.last_digest}"
                )
            )


def _chains(slug: object) -> list[Tenant | None]:
    """The chains to walk: one tenant's, or every tenant's and that of events with none."""
    if slug:
        tenant = Tenant.objects.filter(slug=str(slug)).first()
        if tenant is None:
            raise CommandError(f"no tenant {slug!r}")
        return [tenant]
    return [*Tenant.objects.order_by("slug"), None]
