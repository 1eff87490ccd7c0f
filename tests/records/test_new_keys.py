"""A key taken for the first time under ``reserve_key``: what its caller is told to do next,
and the record's time to live and lease as the caller asked for them."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.conf import settings
from django.utils import timezone

from ledger.domain import Decision, ObservationCode
from tests.factories import refresh, reserve

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
