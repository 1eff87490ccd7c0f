"""``manage.py classify`` and the strict settings, run as a user would run them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.processes import server_url

ROOT = Path(__file__).resolve().parents[1]
GIT_TOOLS = ROOT / "tests" / "fixtures" / "mcp" / "mcp_server_git_tools_list.json"
WRITE_VERBS = ("commit", "add", "reset", "create", "checkout")


def _manage(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    # The test runner's async escape hatch is not part of a deployment.
    base = {k: v for k, v in os.environ.items() if k != "DJANGO_ALLOW_ASYNC_UNSAFE"}
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={**base, **(env or {})},
        timeout=60,
        check=False,
    )


def test_classify_commands_prints_a_json_array(tmp_path: Path) -> None:
    commands = ["ls", "git status", "cat a > b", "npm publish", "rm -rf /", "ls; rm -rf /"]
    source = tmp_path / "commands.json"
    source.write_text(json.dumps(commands))
    result = _manage("classify", "--commands", str(source))
    assert result.returncode == 0, result.stderr
    rows = json.loads(result.stdout)
    assert [r["command"] for r in rows] == commands
    assert set(rows[0]) == {"command", "idempotency", "replay_policy", "destructive", "reason"}
    assert [r["replay_policy"] for r in rows] == ["auto", "auto", "ask", "never", "never", "never"]
    assert rows[4]["destructive"] and rows[5]["destructive"]


def test_classify_real_mcp_server_untrusted_never_auto_for_writers() -> None:
    result = _manage("classify", "--mcp", str(GIT_TOOLS), "--trust", "untrusted")
    assert result.returncode == 0, result.stderr
    rows = json.loads(result.stdout)
    assert len(rows) == 12
    for row in rows:
        if any(verb in row["name"] for verb in WRITE_VERBS):
            assert row["replay_policy"] == "never", row


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--mcp", str(GIT_TOOLS)], "--mcp needs --trust"),
        (["--commands", "/nonexistent.json"], "cannot read"),
        (["--commands", str(GIT_TOOLS)], "expected a JSON array of command strings"),
        (["--mcp", "-", "--trust", "untrusted"], "not valid JSON"),
    ],
)
def test_classify_bad_input_is_a_clear_error(args: list[str], message: str) -> None:
    result = _manage("classify", *args)
    assert result.returncode != 0
    assert message in result.stderr


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"DEBUG": "ture"}, "DEBUG='ture' is not a boolean"),
        ({"LEDGER_LEASE_SECONDS": "-5"}, "LEDGER_LEASE_SECONDS='-5' must be greater than zero"),
        ({"LEDGER_DEFAULT_TTL_SECONDS": "week"}, "is not a whole number"),
        ({"DATABASE_URL": "mysql://x/y"}, "DATABASE_URL must be a URL with one of the schemes"),
        ({"DEBUG": "false", "SECRET_KEY": ""}, "SECRET_KEY must be set when DEBUG is off"),
    ],
)
def test_bad_settings_stop_start_up_with_a_clear_message(env: dict[str, str], message: str) -> None:
    result = _manage("check", env=env)
    assert result.returncode != 0
    assert message in result.stderr


@pytest.mark.django_db
def test_production_settings_pass_the_deploy_check() -> None:
    from django.conf import settings

    database = settings.DATABASES["default"]  # the test database: migrated, no demo users
    env = {
        "DATABASE_URL": f"{server_url(database)}/{database['NAME']}",
        "DEBUG": "false",
        "SECRET_KEY": "a-long-random-production-secret-" + "x" * 40,
        "ALLOWED_HOSTS": "ledger.example.com",
        "SECURE_SSL_REDIRECT": "true",
    }
    result = _manage("check", "--deploy", "--fail-level", "WARNING", env=env)
    assert result.returncode == 0, result.stderr


@pytest.mark.django_db
def test_issue_token_prints_a_token_once_and_stores_only_its_hash(tenant) -> None:
    from io import StringIO

    from django.core.management import call_command

    from ledger.models import ApiToken, AuditEvent

    out = StringIO()
    call_command("issue_token", "acme", "runtime-1", "--service-account", "runtime", stdout=out)
    plaintext = out.getvalue().strip()
    token = ApiToken.objects.get(tenant=tenant)
    assert plaintext.startswith("al_") and len(plaintext) > 40
    assert token.token_hash == ApiToken.hash(plaintext) and plaintext not in token.token_hash
    assert token.prefix == plaintext[:10]
    assert AuditEvent.objects.filter(action="token.issued", target_id=str(token.pk)).exists()
    assert token.user.service_account.name == "runtime"
    assert not token.user.has_usable_password()


def _documented_issue_token_args() -> list[str]:
    import shlex

    [line] = [
        line
        for line in (ROOT / "docs" / "api.md").read_text().splitlines()
        if "manage.py issue_token" in line
    ]
    words = shlex.split(line, comments=True)
    return words[words.index("issue_token") + 1 :]


@pytest.mark.django_db
def test_issue_token_works_on_a_fresh_database_as_the_docs_write_it() -> None:
    from io import StringIO

    from django.core.management import call_command

    from ledger.models import ApiToken, Tenant

    out = StringIO()
    call_command("issue_token", *_documented_issue_token_args(), stdout=out)
    token = ApiToken.objects.get(token_hash=ApiToken.hash(out.getvalue().strip()))
    assert token.tenant == Tenant.objects.get(slug="demo")
    assert token.user.service_account.tenant == token.tenant


@pytest.mark.django_db
def test_issue_token_for_a_member_is_owned_by_them(tenant, django_user_model) -> None:
    from io import StringIO

    from django.core.management import CommandError, call_command

    from ledger.models import ApiToken, Membership

    alice = django_user_model.objects.create_user("alice", password="pw-123456789")
    with pytest.raises(CommandError, match="'alice' is not a member of tenant 'acme'"):
        call_command("issue_token", "acme", "laptop", "--user", "alice")
    Membership.objects.create(user=alice, tenant=tenant)
    out = StringIO()
    call_command("issue_token", "acme", "laptop", "--user", "alice", stdout=out)
    assert ApiToken.objects.get(token_hash=ApiToken.hash(out.getvalue().strip())).user == alice
    with pytest.raises(CommandError, match="no active user 'bob'"):
        call_command("issue_token", "acme", "laptop", "--user", "bob")


@pytest.mark.django_db
def test_issue_token_gives_a_service_account_the_scopes_named_and_never_deciding(tenant) -> None:
    from io import StringIO

    from django.core.management import CommandError, call_command

    from ledger.models import ApiToken

    out = StringIO()
    call_command("issue_token", "acme", "ci", "--service-account", "ci", stdout=out)
    runtime = ApiToken.objects.get(token_hash=ApiToken.hash(out.getvalue().strip()))
    assert runtime.scopes == ["calls", "combinations", "runs", "tools"]
    out = StringIO()
    call_command(
        "issue_token",
        "acme",
        "deployer",
        "--service-account",
        "ci",
        "--scope",
        "lifecycle",
        stdout=out,
    )
    deployer = ApiToken.objects.get(token_hash=ApiToken.hash(out.getvalue().strip()))
    assert deployer.scopes == ["lifecycle"]
    with pytest.raises(CommandError, match="never decide approvals"):
        call_command(
            "issue_token", "acme", "bot", "--service-account", "ci", "--scope", "approvals:decide"
        )
    assert ApiToken.objects.filter(tenant=tenant).count() == 2


def test_issue_token_needs_an_owner() -> None:
    result = _manage("issue_token", "acme", "runtime-1")
    assert result.returncode != 0
    assert "one of the arguments --user --service-account is required" in result.stderr


@pytest.mark.django_db
def test_issue_token_for_an_unknown_tenant_is_a_clear_error() -> None:
    from django.core.management import CommandError, call_command

    with pytest.raises(CommandError, match="no tenant 'nope'"):
        call_command("issue_token", "nope", "runtime-1", "--service-account", "runtime")


def test_env_example_is_a_valid_configuration() -> None:
    values = {}
    for line in (ROOT / ".env.example").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            name, _, value = line.partition("=")
            values[name] = value
    assert {
        "DATABASE_URL",
        "CELERY_BROKER_URL",
        "SECRET_KEY",
        "LEDGER_LEASE_SECONDS",
        "RECONCILE_CLAIM_SECONDS",
        "LEDGER_MAX_BODY_BYTES",
    } <= set(values)
    values["DATABASE_URL"] = os.environ["DATABASE_URL"]  # the example's host may not exist here
    result = _manage("check", env=values)
    assert result.returncode == 0, result.stderr
