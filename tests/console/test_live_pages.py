"""The pages of a call, an action, an unknown call and an approval refresh the parts of them
that change (state, look-ups, approvals, timeline) by polling themselves: each names its parts
and has them; the forms sit in parts of their own, which static/console/live.js leaves alone
while the user is in them (tests/browser/test_live_pages.py). A page polling itself is not the
user opening it: an approval's poll does not claim it."""

from __future__ import annotations

import re

import pytest

from console.models import ApprovalClaim
from ledger.models import LedgerEntry
from tests.console.conftest import make_pending, make_user, signed_in

pytestmark = pytest.mark.django_db

POLL = {"HX-Request": "true", "X-Console-Poll": "true"}


def _pages(approval) -> dict[str, str]:
    entry = LedgerEntry.objects.filter(record=approval.record).order_by("pk").first()
    return {
        "call": f"/ledger/calls/{entry.pk}/",
        "record": f"/ledger/records/{approval.record_id}/",
        "unknown": f"/unknown/{approval.record_id}/",
        "approval": f"/approvals/{approval.pk}/",
    }


def test_each_object_page_polls_itself_for_the_parts_that_change(django_user_model, tenant):
    approval = make_pending(tenant)
    admin = signed_in(make_user(django_user_model, "root", tenant, "admin"))
    for name, path in _pages(approval).items():
        html = admin.get(path, secure=True).content.decode()
        poller = re.search(r'<div id="[\w-]+" hidden data-live hx-get="([^"]+)"[^>]*>', html)
        assert poller is not None, name
        assert poller.group(1) == path, name
        parts = re.search(r'hx-select-oob="([^"]+)"', poller.group(0)).group(1).split(",")
        assert len(parts) >= 3, name
        for part in parts:
            assert re.search(rf'id="{part[1:]}"[^>]* data-live-part', html), (name, part)
        # Forms are in parts of their own, never in the same part as the state.
        head = html[html.index(f'id="{parts[0][1:]}"') :]
        head = head[: head.index("data-live-part", 40)]
        assert "<form" not in head and "<textarea" not in head, name


def test_an_approvals_own_polling_does_not_claim_it(django_user_model, tenant):
    approval = make_pending(tenant)
    alice = signed_in(make_user(django_user_model, "alice", tenant, "approver"))
    bob = signed_in(make_user(django_user_model, "bob", tenant, "approver"))
    polled = alice.get(f"/approvals/{approval.pk}/", headers=POLL, secure=True)
    assert polled.status_code == 200
    assert not ApprovalClaim.objects.filter(approval=approval).exists()
    bob.get(f"/approvals/{approval.pk}/", secure=True)  # bob opens it
    assert ApprovalClaim.objects.get(approval=approval).user.username == "bob"
    html = alice.get(f"/approvals/{approval.pk}/", headers=POLL, secure=True).content.decode()
    assert "Taken: bob" in html  # alice's page learns who has it
    assert ApprovalClaim.objects.get(approval=approval).user.username == "bob"
