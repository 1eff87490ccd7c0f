"""The demo agent fills a ledger with real decisions, through the client, over HTTP."""

from __future__ import annotations

from collections.abc import Callable
from io import StringIO

import pytest
from django.core.management import call_command
from django.test import override_settings

from ledger.models import (
    ApiToken,
    ApprovalRequest,
    IdempotencyRecord,
    LedgerEntry,
    Run,
    VersionCombination,
)

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def test_demo_agent_produces_every_kind_of_decision(django_user_model) -> None:
    from ledger.models import Membership, Tenant

    approver = django_user_model.objects.create_user("approver", password="pw-123456789")
    demo = Tenant.objects.create(slug="demo", name="Demo Co")
    Membership.objects.create(user=approver, tenant=demo, role="approver")
    # An approver of another tenant does not decide this one's approvals.
    elsewhere = django_user_model.objects.create_user("elsewhere", password="pw-123456789")
    Membership.objects.create(
        user=elsewhere, tenant=Tenant.objects.create(slug="other", name="Other"), role="approver"
    )
    out = StringIO()
    with override_settings(DEBUG=True):  # the demo runs in development only
        call_command("demo_agent", runs=3, stdout=out)
    assert ApiToken.objects.exists()
    assert not ApiToken.objects.filter(revoked_at__isnull=True).exists()  # the demo is over
    combos = {c.label: c.state for c in VersionCombination.objects.all()}
    assert combos == {"baseline": "active", "candidate": "canary", "next": "shadow"}
    # Every baseline run is mirrored by a shadow run, whose side effects never ran.
    shadows = Run.objects.filter(shadow_of__isnull=False)
    assert shadows.count() == 3
    assert set(shadows.values_list("shadow_of__combination__label", flat=True)) == {"baseline"}
    assert LedgerEntry.objects.filter(run__in=shadows, decision="shadow_dry_run").exists()
    assert (
        not IdempotencyRecord.objects.filter(shadow=True)
        .exclude(classified_as="idempotent")
        .exists()
    )
    decisions = set(LedgerEntry.objects.values_list("decision", flat=True))
    assert {"execute", "recorded_result", "forbidden", "approval_required"} <= decisions
    states = set(IdempotencyRecord.objects.values_list("state", flat=True))
    assert {"succeeded", "unknown", "failed_final"} <= states
    assert ApprovalRequest.objects.filter(state="pending").exists()
    assert ApprovalRequest.objects.get(state="rejected").decided_by == approver
    assert "(max 1 per key)" in out.getvalue() and "(max 2" not in out.getvalue()
    # The candidate combination is visibly worse: more calls end uncertain.
    uncertain = {
        label: LedgerEntry.objects.filter(combination__label=label, status="uncertain").count()
        for label in combos
    }
    assert uncertain["candidate"] > uncertain["baseline"]
    again = StringIO()
    with override_settings(DEBUG=True):
        call_command("demo_agent", runs=1, if_empty=True, stdout=again)
    assert "nothing to do" in again.getvalue()


@pytest.mark.scale
def test_the_make_run_demo_works_on_the_embedded_postgresql() -> None:
    """`make run` needs no database server: with DEBUG on and no DATABASE_URL it starts the
    embedded PostgreSQL. Runs the same commands as `make run` on a fresh embedded server."""
    import os
    import shutil
    import subprocess
    import sys
    import tempfile
    from pathlib import Path

    from console import embedded

    # The embedded server runs as a user of its own, who cannot enter pytest's private
    # temporary folders: its data goes to a folder that user may traverse.
    folder = Path(tempfile.mkdtemp(prefix="ledger-embedded-"))
    folder.chmod(0o755)
    pgdata = folder / "pg"
    env = {
        **os.environ,
        "DEBUG": "true",
        "EMBEDDED_PGDATA": str(pgdata),
        "CELERY_BROKER_URL": "memory://",
    }
    for name in ("DJANGO_SETTINGS_MODULE", "DATABASE_URL"):
        env.pop(name, None)

    def manage(*args: str) -> str:
        done = subprocess.run(
            [sys.executable, "manage.py", *args],
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        assert done.returncode == 0, done.stderr[-3000:]
        return done.stdout

    try:
        _make_run_demo(manage)
    finally:
        embedded.stop(pgdata)
        shutil.rmtree(folder, ignore_errors=True)


def _make_run_demo(manage: Callable[..., str]) -> None:
    manage("migrate", "--noinput")
    manage("seed_demo")
    out = manage("demo_agent", "--runs", "2")
    assert "(max 1 per key)" in out and "(max 2" not in out
    assert "nothing to do" in manage("demo_agent", "--if-empty")
    # The workers settling these calls on the same server: tests/browser/test_live_demo.py.


def test_a_demo_left_part_way_is_reported_not_served_as_complete() -> None:
    from ledger.models import Run, Tenant

    tenant = Tenant.objects.create(slug="demo", name="Demo Co")
    Run.objects.create(tenant=tenant, run_id="half-done", user_id="u")  # no completion mark
    out, err = StringIO(), StringIO()
    with override_settings(DEBUG=True):
        call_command("demo_agent", runs=1, if_empty=True, stdout=out, stderr=err)
    assert "incomplete" in err.getvalue() and "delete var/" in err.getvalue()
    assert "nothing to do" not in out.getvalue()
