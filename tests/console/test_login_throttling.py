"""Sign-in throttling per account and per address, on the console's and the admin's login."""

from __future__ import annotations

from datetime import timedelta

import pytest
from axes.models import AccessAttempt
from django.conf import settings
from django.test import Client

from ledger.models import AuditEvent

pytestmark = pytest.mark.django_db
PASSWORD = "the-right-password-42"
LOGIN_PAGES = ["/login/", "/admin/login/"]


@pytest.fixture
def alice(django_user_model):
    return django_user_model.objects.create_user("alice", password=PASSWORD, is_staff=True)


def _sign_in(client: Client, path: str, username: str, password: str, address: str = "10.0.0.1"):
    return client.post(path, {"username": username, "password": password}, REMOTE_ADDR=address)


@pytest.mark.usefixtures("alice")
@pytest.mark.parametrize("path", LOGIN_PAGES)
def test_twenty_wrong_passwords_lock_the_account_even_for_the_right_one(path: str) -> None:
    client = Client()
    assert settings.AXES_FAILURE_LIMIT == 20
    statuses = [_sign_in(client, path, "alice", "wrong").status_code for _ in range(20)]
    assert statuses == [200] * 19 + [429]  # the twentieth failure locks
    locked = _sign_in(client, path, "alice", PASSWORD)
    assert locked.status_code == 429
    assert "_auth_user_id" not in client.session
    failed = AuditEvent.objects.filter(action="login.failed", actor="alice", outcome="denied")
    assert failed.count() == 20
    throttled = AuditEvent.objects.get(action="login.throttled", actor="alice")
    assert throttled.outcome == "denied" and "throttled" in throttled.detail
    # From another address too: the account itself is locked.
    assert _sign_in(Client(), path, "alice", PASSWORD, address="10.9.9.9").status_code == 429


@pytest.mark.usefixtures("alice")
def test_twenty_failures_from_one_address_lock_that_address() -> None:
    client = Client()
    for n in range(20):
        _sign_in(client, "/login/", f"guess-{n}", "wrong", address="10.0.0.7")
    assert _sign_in(client, "/login/", "alice", PASSWORD, address="10.0.0.7").status_code == 429
    assert _sign_in(Client(), "/login/", "alice", PASSWORD, address="10.0.0.8").status_code == 302


@pytest.mark.usefixtures("alice")
def test_the_lock_lifts_after_the_configured_time() -> None:
    client = Client()
    for _ in range(20):
        _sign_in(client, "/login/", "alice", "wrong")
    assert _sign_in(client, "/login/", "alice", PASSWORD).status_code == 429
    AccessAttempt.objects.update(
        attempt_time=AccessAttempt.objects.get().attempt_time
        - settings.AXES_COOLOFF_TIME
        - timedelta(seconds=1)
    )
    assert _sign_in(client, "/login/", "alice", PASSWORD).status_code == 302
    assert AuditEvent.objects.filter(action="login.succeeded", actor="alice").exists()


@pytest.mark.usefixtures("alice")
def test_nineteen_failures_then_the_right_password_signs_in_and_resets_the_count() -> None:
    client = Client()
    for _ in range(19):
        _sign_in(client, "/login/", "alice", "wrong")
    assert _sign_in(client, "/login/", "alice", PASSWORD).status_code == 302
    assert not AccessAttempt.objects.filter(username="alice").exists()
