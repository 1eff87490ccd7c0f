"""A key taken for the first time under ``reserve_key``: what its caller is told to do next,
its audit event, the record's class and shadow flag, and its time to live and lease as the
caller asked for them."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.conf import settings
from django.utils import timezone

from ledger.domain import POLICY_FOR, DataClassification, Decision, Idempotency, ObservationCode
from ledger.keys import fingerprint
from ledger.models import AuditEvent, Run
from ledger.records import reserve_key
from tests.factories import make_run, make_tenant, refresh, reserve

pytestmark = pytest.mark.django_db


def test_a_new_key_executes_at_once_unless_an_approval_comes_first(tenant, create_order) -> None:
    executing = reserve(tenant, create_order, key="k-new")
    assert (executing.created, executing.decision, executing.code, executing.next_action) == (
        True,
        Decision.EXECUTE,
        None,
        "execute",
    )
    waiting = reserve(tenant, create_order, key="k-approval", requires_approval=True)
    assert (waiting.created, waiting.decision, waiting.code, waiting.next_action) == (
        True,
        Decision.APPROVAL_REQUIRED,
        ObservationCode.APPROVAL_REQUIRED,
        "await_approval",
    )
    assert refresh(waiting.record).state == "reserved"


def test_a_new_key_keeps_the_time_to_live_and_lease_its_caller_asked_for(
    tenant, create_order
) -> None:
    ttl, lease = settings.LEDGER_DEFAULT_TTL_SECONDS + 3600, settings.LEDGER_LEASE_SECONDS * 10
    record = refresh(reserve(tenant, create_order, ttl_seconds=ttl, lease_seconds=lease).record)
    assert record.ttl_seconds == ttl
    # The lease ends by the database's clock; a few seconds either way are the test's own.
    assert record.lease_expires_at is not None
    left = record.lease_expires_at - timezone.now()
    assert timedelta(seconds=lease - 30) < left <= timedelta(seconds=lease)


@pytest.mark.parametrize(
    ("requires_approval", "action", "state", "token"),
    [(False, "record.started", "executing", 1), (True, "record.reserved", "reserved", 0)],
)
def test_a_new_key_is_audited_in_its_tenant_with_the_record_it_created(
    create_order, requires_approval: bool, action: str, state: str, token: int
) -> None:
    make_tenant("other")  # a second tenant, so the event's tenant is not the only one there is
    tenant = create_order.tenant
    record = reserve(tenant, create_order, requires_approval=requires_approval).record
    event = AuditEvent.objects.get(target_type="idempotencyrecord", target_id=str(record.pk))
    assert (event.tenant_id, event.action, event.actor) == (tenant.pk, action, "worker-1")
    assert event.after == {
        "state": state,
        "fencing_token": token,
        "lease_owner": "" if requires_approval else "worker-1",
        "executions": token,
        "failed_executions": 0,
    }


def test_a_new_key_keeps_its_class_and_the_shadow_run_that_took_it(tenant, create_order) -> None:
    """Only a read may hold a shadow run's record: the database refuses any other."""
    shadow_run = Run.objects.create(
        tenant=tenant, run_id="shadow-1", user_id="u1", shadow_of=make_run(tenant)
    )
    reservation = reserve_key(
        tenant=tenant,
        tool=create_order,
        key="agent:acme:u1:shadow-1:create_order:read",
        fingerprint=fingerprint({}),
        replay_policy=POLICY_FOR[Idempotency.IDEMPOTENT],
        data_classification=DataClassification.INTERNAL,
        lease_owner="w",
        actor="w",
        run=shadow_run,
    )
    record = refresh(reservation.record)
    assert (record.classified_as, record.shadow) == (Idempotency.IDEMPOTENT, True)
