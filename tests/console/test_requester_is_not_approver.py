"""The requester never decides their own request: compared as users, not as strings."""

from __future__ import annotations

import pytest

from ledger.models import ApiToken, ApprovalRequest, AuditEvent, ServiceAccount
from ledger.services.approvals import DeciderRefused, decide
from tests.api.conftest import ApiClient
from tests.console.conftest import make_pending, make_user, signed_in

pytestmark = pytest.mark.django_db


def _requested_with_token_of(user, tenant) -> ApprovalRequest:
    _token, plaintext = ApiToken.issue(tenant=tenant, name="alice-laptop", user=user)
    return make_pending(tenant, api=ApiClient(tenant, plaintext))


def test_an_approver_holding_the_requesting_token_cannot_approve(django_user_model, tenant):
    alice = make_user(django_user_model, "alice", tenant, "approver")
    approval = _requested_with_token_of(alice, tenant)
    assert approval.requested_by_user == alice
    response = signed_in(alice).post(f"/approvals/{approval.pk}/decide", {"decision": "approve"})
    assert response.status_code == 403
    approval.refresh_from_db()
    assert approval.state == "pending"
    refused = AuditEvent.objects.get(action="approval.decide_refused", actor="alice")
    assert refused.outcome == "denied" and "their own request" in refused.detail
    assert refused.target_id == str(approval.pk)


def test_a_different_approver_can_approve(django_user_model, tenant):
    alice = make_user(django_user_model, "alice", tenant, "approver")
    bob = make_user(django_user_model, "bob", tenant, "approver")
    approval = _requested_with_token_of(alice, tenant)
    response = signed_in(bob).post(f"/approvals/{approval.pk}/decide", {"decision": "approve"})
    assert response.status_code == 302
    approval.refresh_from_db()
    assert approval.state == "approved" and approval.decided_by == bob


def test_the_approval_page_shows_the_requesting_user(django_user_model, tenant):
    alice = make_user(django_user_model, "alice", tenant, "approver")
    bob = make_user(django_user_model, "bob", tenant, "approver")
    approval = _requested_with_token_of(alice, tenant)
    theirs = signed_in(bob).get(f"/approvals/{approval.pk}/").content.decode()
    assert "Requesting user</dt><dd>alice</dd>" in theirs
    own = signed_in(alice).get(f"/approvals/{approval.pk}/").content.decode()
    assert "someone else must decide it" in own and 'value="approve"' not in own


def test_a_service_accounts_request_needs_a_human(django_user_model, tenant):
    approval = make_pending(tenant)  # with a token of a service account
    account = ServiceAccount.objects.get(user=approval.requested_by_user)
    other = ServiceAccount.named(tenant=tenant, name="another-runtime")
    for user in (account.user, other.user):
        with pytest.raises(DeciderRefused):
            decide(approval=approval, user=user, approve=True, reason="")
    approval.refresh_from_db()
    assert approval.state == "pending"
    human = make_user(django_user_model, "carol", tenant, "approver")
    assert decide(approval=approval, user=human, approve=True, reason="").state == "approved"


def test_the_person_who_asked_cannot_approve(django_user_model, tenant):
    """A request made in a person's name (the console, not a token) is theirs too."""
    dave = make_user(django_user_model, "dave", tenant, "approver")
    approval = make_pending(tenant)
    ApprovalRequest.objects.filter(pk=approval.pk).update(
        requested_by="dave", requested_by_user=None
    )
    approval.refresh_from_db()
    with pytest.raises(DeciderRefused):
        decide(approval=approval, user=dave, approve=True, reason="")
