"""The operator's home page: what needs a human (a write conflict is one), and whether a
reconciliation worker is looking unknown calls up at all."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from ledger.clock import db_now
from ledger.domain import EscalationKind
from ledger.models import IdempotencyRecord
from reconcile.models import Heartbeat
from reconcile.tasks import schedule_reconciliation
from tests.api.conftest import client_for
from tests.console.conftest import make_user, sha, signed_in

pytestmark = pytest.mark.django_db


def test_a_conflict_found_by_the_runtime_is_escalated_and_counted(django_user_model, tenant):
    api = client_for(tenant)
    api.start_run()
    plan = {"workspace": "w", "path": "a.py", "before_hash": sha("a"), "after_hash": sha("b")}
    first = api.call("write_file", {"path": "a.py"}, write_plan=plan).json()
    api.post(f"/calls/{first['call_id']}/complete", {"fencing_token": 1, "outcome": "uncertain"})
    api.post(f"/calls/{first['call_id']}/replay", {"current_hash": sha("someone else")})
    record = IdempotencyRecord.objects.get()
    assert record.escalated_at is not None and record.escalation_reason.startswith("Write conflict")
    assert record.escalation_kind == EscalationKind.WRITE_CONFLICT
    operator = signed_in(make_user(django_user_model, "olga", tenant, "operator"))
    assert operator.get("/", secure=True).context["inbox"]["conflicts"].count == 1


def test_operators_are_told_when_no_worker_is_looking_calls_up(django_user_model, tenant) -> None:
    operator = signed_in(make_user(django_user_model, "olga", tenant, "operator"))
    assert "No reconciliation worker has run yet" in operator.get("/", secure=True).content.decode()
    schedule_reconciliation()  # what a worker runs every 10 s
    home = operator.get("/", secure=True).content.decode()
    assert "reconciliation worker" not in home
    Heartbeat.objects.update(beat_at=timezone.now() - timedelta(minutes=5))
    unknown = operator.get("/unknown/", secure=True).content.decode()
    assert "Look-ups have stopped: no reconciliation worker has run for 5" in unknown


@pytest.mark.parametrize("skew", [timedelta(minutes=-10), timedelta(minutes=10)])
def test_the_workers_heartbeat_is_stamped_and_judged_by_the_databases_clock(skew) -> None:
    """A worker or web process whose clock is off by minutes neither hides a stopped worker
    nor reports a running one as stopped (DESIGN section 3, one clock)."""
    from unittest import mock

    from console.selectors import reconciler

    skewed = timezone.now() + skew
    with mock.patch("django.utils.timezone.now", return_value=skewed):
        schedule_reconciliation()
        assert reconciler().running
    Heartbeat.objects.update(beat_at=db_now() - timedelta(minutes=5))
    with mock.patch("django.utils.timezone.now", return_value=skewed):
        assert not reconciler().running
