"""The API tokens page: a tenant's admins list its tokens and revoke one, audited; a revoked
token is refused at its next request; nobody else may see or revoke them."""

from __future__ import annotations

import pytest

from ledger.models import ApiToken, AuditEvent
from tests.api.conftest import ApiClient
from tests.console.conftest import make_user, signed_in

pytestmark = pytest.mark.django_db


@pytest.fixture
def admin(django_user_model, tenant):
    return make_user(django_user_model, "ada", tenant, "admin")


def _issue(tenant, name: str, user=None) -> tuple[ApiToken, str]:
    return ApiToken.issue(tenant=tenant, name=name, user=user)


def test_an_admin_lists_the_tenants_tokens_and_only_those(admin, tenant, other_tenant) -> None:
    mine, _ = _issue(tenant, "ci-runtime")
    theirs, _ = _issue(other_tenant, "their-runtime")
    page = signed_in(admin).get("/tokens/")
    assert page.status_code == 200
    assert mine.prefix in page.content.decode()
    assert theirs.prefix not in page.content.decode()


def test_an_admin_revokes_a_token_and_it_stops_at_once(admin, tenant) -> None:
    token, plaintext = _issue(tenant, "leaked")
    api = ApiClient(tenant, plaintext)
    assert api.start_run()["run_id"] == "run-1"
    response = signed_in(admin).post(
        "/tokens/revoke", {"token": token.pk, "reason": "pasted in a ticket"}, follow=True
    )
    assert "revoked" in response.content.decode()
    token.refresh_from_db()
    assert token.revoked_at is not None and token.revoked_by == "ada"
    assert api.get("/runs/run-1").status_code == 401
    event = AuditEvent.objects.get(action="token.revoked")
    assert (event.actor, event.target_id, event.detail) == (
        "ada",
        str(token.pk),
        "pasted in a ticket",
    )


def test_a_revocation_needs_a_reason_and_changes_nothing_without_one(admin, tenant) -> None:
    token, _ = _issue(tenant, "ci")
    response = signed_in(admin).post(
        "/tokens/revoke", {"token": token.pk, "reason": " "}, follow=True
    )
    assert "Say why" in response.content.decode()
    token.refresh_from_db()
    assert token.revoked_at is None
    assert not AuditEvent.objects.filter(action="token.revoked").exists()


def test_another_tenants_token_cannot_be_revoked(admin, tenant, other_tenant) -> None:
    theirs, _ = _issue(other_tenant, "their-runtime")
    response = signed_in(admin).post(
        "/tokens/revoke", {"token": theirs.pk, "reason": "x"}, follow=True
    )
    assert (
        "No such token" in response.content.decode() or "no such token" in response.content.decode()
    )
    theirs.refresh_from_db()
    assert theirs.revoked_at is None


@pytest.mark.parametrize("role", ["", "operator", "approver", "manager"])
def test_only_admins_see_and_revoke_tokens(django_user_model, tenant, role: str) -> None:
    token, _ = _issue(tenant, "ci")
    user = make_user(django_user_model, "someone", tenant, role)
    client = signed_in(user)
    assert client.get("/tokens/").status_code == 403
    assert client.post("/tokens/revoke", {"token": token.pk, "reason": "x"}).status_code == 403
    token.refresh_from_db()
    assert token.revoked_at is None


def test_the_page_shows_what_a_former_members_token_may_do_now(
    admin, django_user_model, tenant
) -> None:
    former = make_user(django_user_model, "bob", tenant, "manager")
    token, _ = _issue(tenant, "bob-laptop", user=former)
    former.memberships.all().delete()
    page = signed_in(admin).get("/tokens/").content.decode()
    assert token.prefix in page and "not a member" in page


def test_a_token_revoked_by_nobody_named_says_when_without_an_empty_by(admin, tenant) -> None:
    from django.utils import timezone

    token, _ = _issue(tenant, "expired-by-script")
    ApiToken.objects.filter(pk=token.pk).update(revoked_at=timezone.now(), revoked_by="")
    html = signed_in(admin).get("/tokens/").content.decode()
    cell = html.split(token.prefix)[1].split("</tr>")[0]
    assert "revoked " in cell and " by " not in cell and " by <" not in cell
