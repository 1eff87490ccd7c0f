"""docs/downstream.md, run as written: the library installed from its folder into a fresh
virtual environment outside the repository, a Django and a FastAPI service made of the guide's
examples, and the ledger registering and looking them up as the guide says."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from django.conf import settings

from ledger.domain import RecordState
from ledger.records import Outcome, complete_execution
from reconcile.services import reconcile_record
from sandbox.invoices import async_url
from sandbox.process import ServiceProcess, drop_database, free_port, fresh_database
from tests.factories import refresh, reserve
from tests.processes import server_url
from tests.shared_builds import once_per_run

pytestmark = [
    pytest.mark.django_db,
    pytest.mark.slow,
    pytest.mark.usefixtures("private_downstreams"),
]
ROOT = Path(__file__).resolve().parents[2]
GUIDE = (ROOT / "docs" / "downstream.md").read_text()
TOKEN = "docs-example-token"


def _example(name: str, language: str = "python") -> str:
    match = re.search(rf"<!-- example: {name} -->\n```{language}\n(.*?)```", GUIDE, re.S)
    assert match, f"docs/downstream.md has no {language} example {name!r}"
    return match.group(1)


#: The test run's own settings, which a project outside the repository must not inherit.
PRIVATE = ("DJANGO_SETTINGS_MODULE", "DATABASE_URL", "VIRTUAL_ENV", "PYTHONPATH")


def _outside_env(venv: Path) -> dict[str, str]:
    env = {name: value for name, value in os.environ.items() if name not in PRIVATE}
    return {
        **env,
        "PATH": f"{venv / 'bin'}:{os.environ['PATH']}",
        "LOOKUP_TOKEN": TOKEN,
        # Byte-compiling every installed module costs CPU on a shared machine, and the test
        # imports a small part of them.
        "PIP_NO_COMPILE": "1",
        "PIP_DISABLE_PIP_VERSION_CHECK": "1",
    }


def _shell(venv: Path, line: str, cwd: Path) -> str:
    result = subprocess.run(
        ["bash", "-c", line],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=600,
        env=_outside_env(venv),
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout


@pytest.fixture(scope="session")
def venv(tmp_path_factory: pytest.TempPathFactory, worker_id: str) -> Path:
    """A fresh venv outside the repository with the guide's install lines run in it, made once
    a run and shared by the xdist workers (``shared_builds``): the tests only read it."""

    def build(fresh: Path) -> None:
        # The build writes into the folder it installs from: a copy keeps the repository clean.
        checkout = fresh / "checkout"
        shutil.copytree(
            ROOT / "downstream",
            checkout / "downstream",
            ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"),
        )
        path = fresh / "venv"
        subprocess.run([sys.executable, "-m", "venv", str(path)], check=True, timeout=120)
        for line in _example("install", "sh").splitlines():
            if line.strip():
                _shell(path, line, checkout)

    return once_per_run(tmp_path_factory, worker_id, "docs-downstream", build) / "venv"


def _server() -> str:
    return server_url(settings.DATABASES["default"])


@pytest.fixture
def database(request: pytest.FixtureRequest) -> Iterator[str]:
    name = f"{settings.DATABASES['default']['NAME']}_docs_{request.node.name[-12:]}"
    name = re.sub(r"\W", "_", name)[:63]
    url = fresh_database(_server(), name)
    try:
        yield url
    finally:
        drop_database(_server(), name)


def test_the_library_installs_as_a_typed_distribution(venv: Path) -> None:
    out = _shell(
        venv,
        "python -c 'import agent_ledger_downstream as d, pathlib; "
        'p = pathlib.Path(d.__file__).parent; print(d.__version__, (p / "py.typed").exists(), p)\'',
        Path("/"),
    )
    version, typed, where = out.split()
    assert version == "0.1.0" and typed == "True"
    assert Path(where).is_relative_to(venv) and not Path(where).is_relative_to(ROOT)


def _django_project(root: Path, database_url: str) -> None:
    """A Django project whose settings, views and URLs are the guide's examples."""
    (root / "shop").mkdir(parents=True)
    (root / "orders").mkdir()
    for package in ("shop", "orders"):
        (root / package / "__init__.py").write_text("")
    (root / "manage.py").write_text(
        "import os, sys\n"
        "from django.core.management import execute_from_command_line\n"
        "os.environ.setdefault('DJANGO_SETTINGS_MODULE', 'shop.settings')\n"
        "execute_from_command_line(sys.argv)\n"
    )
    base = (
        "SECRET_KEY = 'docs-example-not-secret-0123456789abcdefghijklmnopqrstuvwxyz'\n"
        "ALLOWED_HOSTS = ['127.0.0.1']\n"
        "INSTALLED_APPS = ['django.contrib.contenttypes', 'orders']\n"
        "MIDDLEWARE = []\n"
        "ROOT_URLCONF = 'shop.urls'\n"
        "USE_TZ = True\n"
        "DEFAULT_AUTO_FIELD = 'django.db.models.BigAutoField'\n"
        f"DATABASES = {{'default': {_django_database(database_url)!r}}}\n"
    )
    (root / "shop" / "settings.py").write_text(base + _example("django-settings"))
    (root / "shop" / "urls.py").write_text(_example("django-urls"))
    (root / "orders" / "views.py").write_text(_example("django-views"))
    (root / "orders" / "models.py").write_text(
        "from django.db import models\n\n\n"
        "class Order(models.Model):\n"
        "    reference = models.CharField(max_length=100)\n"
    )


def _django_database(url: str) -> dict[str, str]:
    db = settings.DATABASES["default"]
    return {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": url.rsplit("/", 1)[1],
        "USER": db["USER"],
        "HOST": db["HOST"],
        "PORT": str(db["PORT"]),
    }


def _fastapi_project(root: Path) -> None:
    root.mkdir(parents=True)
    (root / "app.py").write_text(_example("fastapi"))


def _start(kind: str, venv: Path, root: Path, database_url: str) -> ServiceProcess:
    port = free_port()
    bin_ = venv / "bin"
    if kind == "django":
        _shell(venv, "python manage.py makemigrations orders -v0", root)
        _shell(venv, "python manage.py migrate -v0", root)
        command = [str(bin_ / "python"), "manage.py", "runserver", f"127.0.0.1:{port}"]
        command.append("--noreload")
    else:
        command = [str(bin_ / "uvicorn"), "app:app", "--port", str(port)]
    service = ServiceProcess(
        command,
        port=port,
        env={
            **_outside_env(venv),
            "DJANGO_SETTINGS_MODULE": "shop.settings",
            "DATABASE_URL": async_url(database_url),
        },
        log=root / "service.log",
        cwd=root,
        health_path="/idempotency/probe",
    )
    service.ensure_running(timeout=60)
    return service


@pytest.mark.parametrize("kind", ["django", "fastapi"])
def test_the_guide_makes_a_service_the_ledger_reconciles(
    kind: str, venv: Path, database: str, tmp_path: Path, tenant, create_order, monkeypatch
) -> None:
    root = tmp_path / kind
    _django_project(root, database) if kind == "django" else _fastapi_project(root)
    service = _start(kind, venv, root, database)
    try:
        record = reserve(tenant, create_order, key=f"agent:acme:u1:r:create_order:{uuid.uuid4()}")
        key = record.record.key
        sent = [
            httpx.post(
                f"{service.url}/orders",
                json={"reference": "cart-42"},
                headers={"Idempotency-Key": key},
                timeout=10,
            )
            for _ in range(3)
        ]
        assert [r.status_code for r in sent] == [201, 201, 201]
        assert [r.headers.get("Idempotent-Replayed") for r in sent] == [None, "true", "true"]
        assert sent[1].json() == sent[0].json()
        other = httpx.post(
            f"{service.url}/orders",
            json={"reference": "cart-43"},
            headers={"Idempotency-Key": key},
            timeout=10,
        )
        assert other.status_code == 422
        # The call's answer was lost on the way back: the ledger looks the key up.
        complete_execution(
            record=record.record, fencing_token=1, outcome=Outcome.UNCERTAIN, actor="w"
        )
        monkeypatch.setenv("SERVICE_URL", service.url)
        monkeypatch.setenv("LOOKUP_TOKEN", TOKEN)
        exec(compile(_example("register"), "docs/downstream.md", "exec"), {})  # noqa: S102
        assert reconcile_record(record.record.pk, worker="docs") == "succeeded"
        evidence = refresh(record.record).result["evidence"]
        assert refresh(record.record).state == RecordState.SUCCEEDED
        assert evidence["response"]["body"]["reference"] == "cart-42"
        if kind == "django":
            out = _shell(venv, _example("django-cleanup", "sh").strip(), root)
            assert out.strip() == "deleted 0 stored responses"
    finally:
        service.stop()
