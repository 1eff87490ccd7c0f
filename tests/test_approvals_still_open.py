"""Which approvals still wait for an approver: ``still_open`` is ``void_reason`` as a query, by
the database's clock, and every list of waiting approvals reads it: the inbox's count, the
queue and its neighbours, and the on-call notifications. No job marks an approval expired, so
an expired one is still ``pending`` in the table and must not be counted or announced."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta

import pytest
from django.db.models.functions import Now

from console import selectors
from ledger import notifications
from ledger.domain import RecordState
from ledger.models import ApprovalRequest, IdempotencyRecord, Run, Tenant, VersionCombination
from ledger.services.approvals import still_open, void_reason
from tests.console.conftest import make_pending, make_user, signed_in

pytestmark = pytest.mark.django_db


def _expire(approval: ApprovalRequest) -> None:
    ApprovalRequest.objects.filter(pk=approval.pk).update(expires_at=Now() - timedelta(seconds=1))


def _settle(approval: ApprovalRequest) -> None:
    IdempotencyRecord.objects.filter(pk=approval.record_id).update(
        state=RecordState.SUCCEEDED, expires_at=Now() + timedelta(days=1)
    )


def _fail_retryably(approval: ApprovalRequest) -> None:
    IdempotencyRecord.objects.filter(pk=approval.record_id).update(
        state=RecordState.FAILED_FINAL,
        error={"code": "TIMEOUT"},
        error_retryable=True,
        expires_at=Now() + timedelta(days=1),
    )


def _fail_for_good(approval: ApprovalRequest) -> None:
    IdempotencyRecord.objects.filter(pk=approval.record_id).update(
        state=RecordState.FAILED_FINAL,
        error={"code": "PERMISSION_DENIED"},
        error_retryable=True,
        expires_at=Now() + timedelta(days=1),
    )


def _halt_run(approval: ApprovalRequest) -> None:
    Run.objects.filter(pk=approval.entry.run_id).update(status=Run.Status.HALTED, finished_at=Now())


def _halt_combination(approval: ApprovalRequest) -> None:
    combination = VersionCombination.objects.create(
        tenant_id=approval.tenant_id,
        label="halted",
        model="m",
        prompt="p",
        rules="r",
        tool_schema="t",
        data_version="d",
        fingerprint=VersionCombination.compute_fingerprint(
            model="m", prompt="p", rules="r", tool_schema="t", data_version="d"
        ),
        state=VersionCombination.State.HALTED,
        halted_from=VersionCombination.State.ACTIVE,
    )
    # An entry's combination is its run's (``ledger.calls.entries``).
    Run.objects.filter(pk=approval.entry.run_id).update(combination=combination)
    approval.entry.combination = combination
    approval.entry.save(update_fields=["combination"])


def _decide(approval: ApprovalRequest) -> None:
    ApprovalRequest.objects.filter(pk=approval.pk).update(state=ApprovalRequest.State.APPROVED)


CHANGES: dict[str, Callable[[ApprovalRequest], None]] = {
    "untouched": lambda approval: None,
    "expired": _expire,
    "settled": _settle,
    "failed retryably": _fail_retryably,
    "failed for good": _fail_for_good,
    "run halted": _halt_run,
    "combination halted": _halt_combination,
    "decided": _decide,
}


@pytest.mark.parametrize("change", CHANGES)
def test_still_open_is_void_reason_as_a_query(tenant: Tenant, change: str) -> None:
    approval = make_pending(tenant, f"{change.replace(' ', '_')}.py")
    CHANGES[change](approval)
    fresh = ApprovalRequest.objects.select_related(
        "entry__tool", "entry__run", "entry__combination", "record"
    ).get(pk=approval.pk)
    can_be_given = fresh.state == ApprovalRequest.State.PENDING and void_reason(fresh) is None
    assert still_open().filter(pk=approval.pk).exists() == can_be_given
    assert can_be_given == (change in ("untouched", "failed retryably"))


def test_an_expired_approval_is_not_counted_in_the_inbox_or_listed(tenant: Tenant) -> None:
    waiting, expired = make_pending(tenant, "a.py", "run-a"), make_pending(tenant, "b.py", "run-b")
    _expire(expired)
    inbox = selectors.inbox(tenant)
    assert inbox["approvals"].count == 1
    assert [a.pk for a in selectors.pending_approvals(tenant)] == [waiting.pk]
    assert selectors.queue_neighbours(waiting) == {"previous": None, "next": None}


def test_the_inbox_tile_counts_what_the_queue_shows(django_user_model, tenant: Tenant) -> None:
    make_pending(tenant, "a.py", "run-a")
    _settle(make_pending(tenant, "b.py", "run-b"))
    client = signed_in(make_user(django_user_model, "ann", tenant, "approver"))
    inbox = client.get("/", secure=True).context["inbox"]
    queue = client.get("/approvals/", secure=True).context["approvals"]
    assert inbox["approvals"].count == len(queue) == 1


@pytest.mark.parametrize("void", ["expired", "settled", "run halted"])
def test_an_approval_that_can_no_longer_be_given_is_not_announced(
    tenant: Tenant, settings, void: str
) -> None:
    settings.LEDGER_OUTBOUND_ALLOW_PRIVATE = True
    notifications.add_channel(
        tenant=tenant,
        actor="manager",
        source="console",
        role="approver",
        tier=1,
        kind="email",
        target="approvers@example.com",
    )
    approval = make_pending(tenant)
    CHANGES[void](approval)
    ApprovalRequest.objects.filter(pk=approval.pk).update(created_at=Now() - timedelta(hours=2))
    assert notifications.sweep(batch_size=100) == []


def test_an_approval_that_expires_before_delivery_is_skipped(tenant: Tenant, mailoutbox) -> None:
    notifications.add_channel(
        tenant=tenant,
        actor="manager",
        source="console",
        role="approver",
        tier=1,
        kind="email",
        target="approvers@example.com",
    )
    approval = make_pending(tenant)
    [due] = notifications.sweep(batch_size=100)
    _expire(approval)
    assert notifications.deliver(due) == "skipped"
    assert mailoutbox == []


def test_a_request_that_loses_the_race_joins_the_open_approval(tenant, monkeypatch) -> None:
    """Two requests for one action at once: the second's INSERT meets the open approval the
    first made (the database's unique constraint) and joins it instead of failing."""
    from ledger.services import approvals
    from tests.console.conftest import make_pending

    first = make_pending(tenant)
    looked = iter([None])  # the first look finds nothing open, as a racing request would
    real = approvals.open_approval
    monkeypatch.setattr(approvals, "open_approval", lambda record: next(looked, real(record)))

    joined = approvals.request_approval(
        record=first.record, entry=first.entry, requested_by="other", requester_id=None
    )

    assert joined.pk == first.pk
    assert ApprovalRequest.objects.filter(record=first.record).count() == 1
