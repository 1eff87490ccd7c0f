"""A refusal is the console's own page: it names the role the page needs and who holds it in
the tenant, it is in the user's language, and the log gets one line for it, no traceback."""

from __future__ import annotations

import logging

import pytest

from console.models import Preferences
from tests.console.conftest import make_user, signed_in

pytestmark = pytest.mark.django_db


def test_a_refusal_names_the_role_needed_and_its_holders(django_user_model, tenant) -> None:
    operator = make_user(django_user_model, "olga", tenant, "operator")
    make_user(django_user_model, "alice", tenant, "approver")
    make_user(django_user_model, "mallory", tenant, "manager")
    response = signed_in(operator).get("/approvals/", secure=True)
    assert response.status_code == 403
    page = response.content.decode()
    assert "This page is open to: approver (and admin)." in page
    assert "<li>alice</li>" in page and "mallory" not in page
    assert 'href="/unknown/"' in page  # the console's own top bar, with the operator's pages


def test_a_refusal_holders_come_from_the_users_tenant_only(django_user_model, tenant) -> None:
    from ledger.models import Tenant

    other = Tenant.objects.create(slug="other", name="Other")
    make_user(django_user_model, "outsider", other, "approver")
    operator = make_user(django_user_model, "olga", tenant, "operator")
    page = signed_in(operator).get("/approvals/", secure=True).content.decode()
    assert "outsider" not in page
    assert "Nobody in this tenant holds it yet" in page


def test_a_refusal_is_in_the_users_language(django_user_model, tenant) -> None:
    operator = make_user(django_user_model, "li", tenant, "operator")
    Preferences.objects.create(user=operator, language="zh-hans")
    response = signed_in(operator).get("/combinations/", secure=True)
    assert response.status_code == 403
    page = response.content.decode()
    assert "你的角色无权打开此页面" in page and "负责人" in page
    assert "Your role does not allow this page" not in page


def test_a_refusal_logs_one_line_without_a_traceback(django_user_model, tenant, caplog) -> None:
    operator = make_user(django_user_model, "olga", tenant, "operator")
    with caplog.at_level(logging.INFO, logger="django.request"):
        assert signed_in(operator).get("/metrics/", secure=True).status_code == 403
    refusals = [r for r in caplog.records if r.name == "django.request"]
    assert len(refusals) == 1 and refusals[0].exc_info is None


def test_a_user_without_a_tenant_gets_the_page_too(django_user_model) -> None:
    loner = django_user_model.objects.create_user("loner", password="pw-123456789")
    response = signed_in(loner).get("/", secure=True)
    assert response.status_code == 403
    assert "You are not a member of any tenant." in response.content.decode()


def test_the_top_bar_links_only_to_pages_the_role_opens(django_user_model, tenant) -> None:
    approver = make_user(django_user_model, "alice", tenant, "approver")
    page = signed_in(approver).get("/", secure=True).content.decode()
    assert 'href="/approvals/"' in page
    assert 'href="/unknown/"' not in page and 'href="/combinations/"' not in page
    # A member without a role: the inbox, tools and audit (ledger.models.Membership).
    nobody = make_user(django_user_model, "new", tenant, "")
    page = signed_in(nobody).get("/", secure=True).content.decode()
    assert 'href="/audit/"' in page and 'href="/tools/"' in page
    assert 'href="/ledger/"' not in page and 'href="/approvals/"' not in page
