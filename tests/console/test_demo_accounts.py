"""Demo accounts exist only in development: refused, audited and flagged with DEBUG off."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.core import checks
from django.core.management import CommandError, call_command
from django.test import Client, override_settings

from console.demo import DEMO_PASSWORD, DEMO_USERS
from ledger.models import AuditEvent

pytestmark = pytest.mark.django_db


@pytest.fixture
def seeded() -> None:
    """A database seeded in development, then served with DEBUG off (the test settings)."""
    with override_settings(DEBUG=True):
        call_command("seed_demo")


def _deploy_check_ids() -> set[str]:
    return {m.id for m in checks.run_checks(include_deployment_checks=True) if m.id}


@pytest.mark.usefixtures("seeded")
@pytest.mark.parametrize("username", DEMO_USERS)
@pytest.mark.parametrize("path", ["/login/", "/admin/login/"])
def test_demo_account_sign_in_is_refused_and_audited_with_debug_off(
    username: str, path: str
) -> None:
    client = Client()
    response = client.post(path, {"username": username, "password": DEMO_PASSWORD})
    assert response.status_code == 200  # the form again, with its error
    assert "_auth_user_id" not in client.session
    event = AuditEvent.objects.get(action="login.failed", actor=username)
    assert event.outcome == "denied"
    assert "demo password refused: DEBUG is off" in event.detail
    assert event.source == ("admin" if path.startswith("/admin/") else "console")


@pytest.mark.usefixtures("seeded")
def test_demo_account_signs_in_with_debug_on() -> None:
    client = Client()
    with override_settings(DEBUG=True):
        response = client.post("/login/", {"username": "operator", "password": DEMO_PASSWORD})
    assert response.status_code == 302
    assert "_auth_user_id" in client.session
    assert AuditEvent.objects.filter(action="login.succeeded", actor="operator").exists()


@pytest.mark.usefixtures("seeded")
def test_deploy_check_fails_until_the_demo_users_are_gone() -> None:
    assert "console.E001" in _deploy_check_ids()
    get_user_model().objects.filter(username__in=DEMO_USERS[:-1]).delete()
    assert "console.E001" in _deploy_check_ids()  # one is left
    get_user_model().objects.filter(username=DEMO_USERS[-1]).delete()
    assert "console.E001" not in _deploy_check_ids()


def test_deploy_check_flags_any_user_with_the_demo_password(django_user_model) -> None:
    django_user_model.objects.create_user("someone", password=DEMO_PASSWORD)
    django_user_model.objects.create_user("careful", password="another-long-password-42")
    [error] = [
        m for m in checks.run_checks(include_deployment_checks=True) if m.id == "console.E001"
    ]
    assert "someone" in error.msg and "careful" not in error.msg


@pytest.mark.parametrize("command", ["seed_demo", "demo_agent"])
def test_demo_commands_refuse_to_run_with_debug_off(command: str, django_user_model) -> None:
    with pytest.raises(CommandError, match="DEBUG only"):
        call_command(command)
    assert not django_user_model.objects.exists()
