"""Security headers on console pages, and the session's idle timeout."""

from __future__ import annotations

import time

import pytest
from django.test import Client

from console.sessions import LAST_ACTIVITY
from ledger.models import AuditEvent
from tests.console.conftest import make_user, signed_in

pytestmark = pytest.mark.django_db


def test_console_pages_carry_csp_and_permissions_policy(django_user_model, tenant):
    response = signed_in(make_user(django_user_model, "olga", tenant, "operator")).get("/")
    csp = response["Content-Security-Policy"]
    for directive in ("default-src 'self'", "script-src 'self'", "style-src 'self'"):
        assert directive in csp
    assert "frame-ancestors 'none'" in csp and "object-src 'none'" in csp
    assert "'unsafe-inline'" not in csp and "'unsafe-eval'" not in csp
    assert "camera=()" in response["Permissions-Policy"]
    assert "geolocation=()" in response["Permissions-Policy"]
    login = Client().get("/login/")
    assert "script-src 'self'" in login["Content-Security-Policy"]


def test_pages_with_evidence_are_never_cached(django_user_model, tenant, pending):
    client = signed_in(make_user(django_user_model, "alice", tenant, "approver"))
    for url in ("/", f"/approvals/{pending.pk}/", "/audit/", "/ledger/"):
        assert "no-store" in client.get(url)["Cache-Control"], url


def _idle_for(client: Client, seconds: int) -> None:
    session = client.session
    session[LAST_ACTIVITY] = int(time.time()) - seconds
    session.save()


def test_a_session_idle_past_the_timeout_is_signed_out(django_user_model, tenant, settings):
    client = signed_in(make_user(django_user_model, "olga", tenant, "operator"))
    client.get("/")
    _idle_for(client, settings.SESSION_IDLE_MINUTES * 60 - 30)
    assert client.get("/").status_code == 200  # still within the timeout
    _idle_for(client, settings.SESSION_IDLE_MINUTES * 60 + 1)
    response = client.get("/unknown/")
    assert response.status_code == 302 and response["Location"].startswith("/login/")
    assert "_auth_user_id" not in client.session
    assert AuditEvent.objects.filter(action="session.expired", actor="olga").exists()


def test_the_inbox_polling_is_not_activity(django_user_model, tenant, settings):
    client = signed_in(make_user(django_user_model, "olga", tenant, "operator"))
    client.get("/")
    _idle_for(client, settings.SESSION_IDLE_MINUTES * 60 - 30)
    stamp = client.session[LAST_ACTIVITY]
    poll = {"HX-Request": "true", "X-Console-Poll": "true"}
    assert client.get("/", headers=poll).status_code == 200
    assert client.session[LAST_ACTIVITY] == stamp  # not refreshed
    _idle_for(client, settings.SESSION_IDLE_MINUTES * 60 + 1)
    expired = client.get("/", headers=poll)
    assert expired.status_code == 204 and expired["HX-Redirect"] == "/login/"
    assert "_auth_user_id" not in client.session


def test_a_click_refreshes_the_idle_clock(django_user_model, tenant, settings):
    client = signed_in(make_user(django_user_model, "olga", tenant, "operator"))
    client.get("/")
    _idle_for(client, settings.SESSION_IDLE_MINUTES * 60 - 30)
    client.get("/unknown/")
    assert int(time.time()) - client.session[LAST_ACTIVITY] < 5
