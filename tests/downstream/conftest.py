"""The two test services built on agent_ledger_downstream, each a real process on a database of
its own: the sandbox billing service (FastAPI + SQLAlchemy) and a Django service with the same
routes. Tests that take ``service`` run against both."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from django.conf import settings

from sandbox.process import (
    ServiceProcess,
    drop_database,
    free_port,
    fresh_database,
    invoices_service,
)
from tests.processes import server_url

TOKEN = "lookup-token-for-tests"
KINDS = ("django", "fastapi")


def _server_url() -> str:
    return server_url(settings.DATABASES["default"])


def _database_name(kind: str) -> str:
    return f"{settings.DATABASES['default']['NAME']}_downstream_{kind}"[:63]


def django_service(database_url: str, log: Path) -> ServiceProcess:
    env = {
        "DJANGO_SETTINGS_MODULE": "tests.downstream.django_service.settings",
        "SERVICE_DATABASE_URL": database_url,
        "LOOKUP_TOKEN": TOKEN,
    }
    subprocess.run(
        [sys.executable, "-m", "django", "migrate", "--run-syncdb", "-v0"],
        env={**os.environ, **env},
        check=True,
        timeout=120,
    )
    port = free_port()
    command = [
        str(Path(sys.executable).parent / "gunicorn"),
        "--bind",
        f"127.0.0.1:{port}",
        "--workers",
        "1",
        "--threads",
        "8",
        "--worker-class",
        "gthread",
        "tests.downstream.django_service.wsgi:application",
    ]
    return ServiceProcess(command, port=port, env=env, log=log)


@dataclass(frozen=True)
class Service:
    kind: str
    process: ServiceProcess
    database_url: str

    @property
    def url(self) -> str:
        return self.process.url


@pytest.fixture(scope="module", params=KINDS)
def running_service(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, django_db_setup: None
) -> Iterator[Service]:
    # After django_db_setup, whatever test comes first: the database is named after the
    # worker's test database only once that exists.
    kind: str = request.param
    name = _database_name(kind)
    database_url = fresh_database(_server_url(), name)
    log = tmp_path_factory.mktemp(f"service-{kind}") / "service.log"
    service = (
        django_service(database_url, log)
        if kind == "django"
        else invoices_service(database_url, token=TOKEN, log=log, faults=True)
    )
    try:
        service.ensure_running()
        yield Service(kind, service, database_url)
    finally:
        service.stop()
        drop_database(_server_url(), name)


@pytest.fixture
def service(running_service: Service) -> Service:
    """The module's service, started again if the last test's fault hook ended it."""
    running_service.process.ensure_running()
    return running_service
