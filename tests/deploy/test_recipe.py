"""The deploy recipe as files (``Containerfile``, ``compose.yaml``, ``.dockerignore``): what
``make drill`` runs at full size (``test_compose_stack.py``) held here without a container."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
SERVING = ("web", "worker", "beat")


def _compose() -> dict[str, Any]:
    return yaml.safe_load((ROOT / "compose.yaml").read_text())


def _image_command() -> list[str]:
    (line,) = [
        line for line in (ROOT / "Containerfile").read_text().splitlines() if line.startswith("CMD")
    ]
    return list(json.loads(line.removeprefix("CMD")))


def test_the_image_serves_with_the_documented_command():
    deploy = (ROOT / "docs" / "deploy.md").read_text()
    documented = re.search(r"## The web server\n\n```sh\n(.*?)\n```", deploy, re.S)
    assert documented is not None
    assert " ".join(_image_command()) == documented.group(1)
    assert "command" not in _compose()["services"]["web"]  # the image's, written once


def test_nothing_serves_before_the_migrations_succeeded():
    services = _compose()["services"]
    assert services["migrate"]["command"] == ["python", "manage.py", "migrate", "--noinput"]
    assert services["migrate"]["restart"] == "no"
    for name in SERVING:
        condition = services[name]["depends_on"]["migrate"]["condition"]
        assert condition == "service_completed_successfully", name


def test_the_migrations_run_as_the_owner_and_everything_else_as_the_serving_role():
    services = _compose()["services"]
    assert services["migrate"]["environment"]["DATABASE_URL"].startswith("postgres://ledger_owner:")
    for name in SERVING:
        assert services[name]["environment"]["DATABASE_URL"].startswith("postgres://ledger:")
        assert "LEDGER_OWNER_PASSWORD" not in json.dumps(services[name]), name


def test_every_password_comes_from_a_variable_that_must_be_set():
    text = (ROOT / "compose.yaml").read_text()
    for name in ("POSTGRES_PASSWORD", "LEDGER_OWNER_PASSWORD", "LEDGER_DB_PASSWORD"):
        uses = re.findall(r"\$\{" + name + r"([^}]*)\}", text)
        assert uses and all(use.startswith(":?") for use in uses), name
    assert not re.search(r"^\s*\w*PASSWORD:\s*[^$\s]", text, re.M)  # a key with a literal


def test_the_web_service_is_probed_for_liveness_and_readiness():
    web = _compose()["services"]["web"]
    assert "/healthz" in " ".join(web["healthcheck"]["test"])
    assert web["labels"]["kompose.service.healthcheck.liveness.http_get_path"] == "/healthz"
    assert web["labels"]["kompose.service.healthcheck.readiness.http_get_path"] == "/readyz"


def test_pgbouncer_is_optional():
    assert _compose()["services"]["pgbouncer"]["profiles"] == ["pgbouncer"]


def test_the_build_context_is_the_service_alone():
    ignored = (ROOT / ".dockerignore").read_text().splitlines()
    rules = [line for line in ignored if line and not line.startswith("#")]
    assert rules[0] == "*"  # everything out, then the service back in by name
    included = {line.removeprefix("!").rstrip("/") for line in rules if line.startswith("!")}
    assert {"console", "ledger", "reconcile", "templates", "static", "locale"} <= included
    assert not included & {".env", "ledger.env", "var", "tests", "client", "sandbox", ".git"}
