"""Two approvers opening the same approval: the second sees it is taken."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from console.claims import CLAIM_TTL
from console.models import ApprovalClaim
from tests.console.conftest import make_pending, make_user, signed_in

pytestmark = pytest.mark.django_db


def test_the_second_approver_sees_who_has_it_open(django_user_model, tenant, pending) -> None:
    alice = signed_in(make_user(django_user_model, "alice", tenant, "approver"))
    bob = signed_in(make_user(django_user_model, "bob", tenant, "approver"))

    first = alice.get(f"/approvals/{pending.pk}/", secure=True)
    assert first.context["taken_by"] is None
    second = bob.get(f"/approvals/{pending.pk}/", secure=True)
    assert second.context["taken_by"].user.username == "alice"
    assert "Taken: alice opened this" in second.content.decode()
    # Alice keeps it; she does not see herself as a rival.
    assert alice.get(f"/approvals/{pending.pk}/", secure=True).context["taken_by"] is None
    assert "taken by alice" in bob.get("/approvals/", secure=True).content.decode()


def test_a_stale_claim_passes_to_the_next_approver(django_user_model, tenant, pending) -> None:
    alice = signed_in(make_user(django_user_model, "alice", tenant, "approver"))
    bob = signed_in(make_user(django_user_model, "bob", tenant, "approver"))
    alice.get(f"/approvals/{pending.pk}/", secure=True)
    claim = ApprovalClaim.objects.get()
    claim.claimed_at -= CLAIM_TTL + timedelta(seconds=1)
    claim.save()
    assert bob.get(f"/approvals/{pending.pk}/", secure=True).context["taken_by"] is None
    assert ApprovalClaim.objects.get().user.username == "bob"
    assert "taken by bob" in alice.get("/approvals/", secure=True).content.decode()


def test_deciding_releases_the_claim(django_user_model, tenant, pending) -> None:
    alice = signed_in(make_user(django_user_model, "alice", tenant, "approver"))
    alice.get(f"/approvals/{pending.pk}/", secure=True)
    alice.post(f"/approvals/{pending.pk}/decide", {"decision": "approve"}, secure=True)
    assert not ApprovalClaim.objects.exists()


def test_previous_and_next_walk_the_pending_queue_oldest_first(django_user_model, tenant):
    queue = [make_pending(tenant, f"f{n}.py", run_id=f"run-{n}") for n in range(3)]
    approver = signed_in(make_user(django_user_model, "alice", tenant, "approver"))
    middle = approver.get(f"/approvals/{queue[1].pk}/", secure=True)
    assert middle.context["neighbours"] == {"previous": queue[0].pk, "next": queue[2].pk}
    html = middle.content.decode()
    assert f'href="/approvals/{queue[2].pk}/" rel="next" data-key="j"' in html
    first = approver.get(f"/approvals/{queue[0].pk}/", secure=True)
    assert first.context["neighbours"] == {"previous": None, "next": queue[1].pk}


@pytest.mark.parametrize("skew", [CLAIM_TTL * 2, -CLAIM_TTL * 2], ids=["ahead", "behind"])
def test_a_claim_is_stamped_and_judged_by_the_database_clock(
    django_user_model, tenant, pending, monkeypatch, skew
) -> None:
    """Alice's web process runs twenty minutes off; Bob's is on time. Her claim still holds
    for Bob, on the approval's page and in the queue, and the queue's ages stay true."""
    alice = signed_in(make_user(django_user_model, "alice", tenant, "approver"))
    bob = signed_in(make_user(django_user_model, "bob", tenant, "approver"))
    real_now = timezone.now
    with monkeypatch.context() as skewed:
        skewed.setattr(timezone, "now", lambda: real_now() + skew)
        alice.get(f"/approvals/{pending.pk}/", secure=True)
    queue = bob.get("/approvals/", secure=True)
    assert "taken by alice" in queue.content.decode()
    (row,) = queue.context["approvals"]
    assert timedelta(0) <= row[0].waited < timedelta(minutes=1)
    page = bob.get(f"/approvals/{pending.pk}/", secure=True)
    assert page.context["taken_by"].user.username == "alice"
    assert ApprovalClaim.objects.get().user.username == "alice"
