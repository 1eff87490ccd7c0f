"""The deploy recipe run as an operator runs it (docs/deploy.md "The recipe"): the image built
from ``Containerfile``, ``compose.yaml``'s stack started from nothing with podman
(podman-compose), migrated by its one-shot service, serving the console and the API, passing
its probes, and a tool call whose outcome is uncertain looked up by the stack's worker and
settled; straight to PostgreSQL, and through PgBouncer (the profile ``pgbouncer``: Debian 12's
1.18 in transaction mode). Everything a run started is taken down afterwards, whatever happened.

No image registry is reachable where the tests run, so the public images compose.yaml names
are replaced, through its own variables, by images made from a Debian root file system that
mmdebstrap builds: the base of the ledger's image and of PgBouncer's (Python with venv, as the
default base has) and stand-ins for PostgreSQL and Redis (``standins.Containerfile``). They are
kept between runs; the ledger's image is rebuilt every run, from its cached layers.

Podman 4.3 (Debian 12's) does not wait for ``service_healthy`` (podman-compose needs podman 4.6
for it) and cannot start a service whose ``depends_on`` chain is two long (web, migrate,
postgres: "generating dependency graph ... not found in input list"). So the test starts the
services in the order compose.yaml's conditions give, checking each condition itself: the
healthchecks as compose.yaml defines them, the migrations' exit code.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from agent_ledger_client import CallContext, LedgerClient
from sandbox.process import free_port

# Builds images and runs the whole stack, minutes: an acceptance run for `make drill`.
pytestmark = pytest.mark.scale

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
#: What the local images are made of: Python with venv (which Debian splits off) for the
#: ledger's image, the servers the stand-ins run, CA certificates for pip and apt.
DEBIAN_SUITE = "bookworm"
DEBIAN_PACKAGES = ("python3", "python3-venv", "ca-certificates", "postgresql-15", "redis-server")
#: Certificate authorities this machine trusts beyond Debian's (a proxy's): the images trust
#: them too, so their builds reach the package registries as the machine does.
LOCAL_CAS = Path("/usr/local/share/ca-certificates")
IMAGES = "localhost/agent-ledger-drill"
#: Where the tools are: podman finds runc, iptables and the like in sbin, which a non-login
#: shell's PATH may lack.
SEARCH_PATH = os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/sbin"])
#: One build at a time on the machine (the images are shared by every checkout's runs).
BUILD_LOCK = Path(tempfile.gettempdir()) / "agent-ledger-deploy-drill.lock"
SETTLED_WITHIN_SECONDS = 60
PASSWORDS = {
    "POSTGRES_PASSWORD": "drillsuperuser0123",
    "LEDGER_OWNER_PASSWORD": "drillowner0123",
    "LEDGER_DB_PASSWORD": "drillledger0123",
}
#: The service's settings (ledger.env): production's, but plain HTTP with no TLS proxy in
#: front, and look-ups may reach the sandbox on the stack's private network.
SETTINGS = {
    "SECRET_KEY": "deploy-drill-only-secret-key-not-for-production-0123456789abcdef",
    "ALLOWED_HOSTS": "127.0.0.1,localhost",
    "SECURE_SSL_REDIRECT": "false",
    "LEDGER_OUTBOUND_ALLOW_PRIVATE": "true",
    "WEB_CONCURRENCY": "2",
}
#: What differs behind PgBouncer 1.18 in transaction mode (docs/deploy.md "Sizing").
PGBOUNCER_VARIABLES = {"COMPOSE_PROFILES": "pgbouncer", "LEDGER_DB_ADDRESS": "pgbouncer:6432"}
PGBOUNCER_SETTINGS = {
    "DATABASE_TIMEOUTS_AT_CONNECT": "false",
    "DATABASE_PREPARED_STATEMENTS": "false",
}
#: Lines that no process of a healthy stack logs.
TROUBLE = re.compile(r'Traceback|permission denied|"level": "(ERROR|CRITICAL)"', re.I)


def _run(argv: list[str], env: dict[str, str], timeout: float = 1200) -> str:
    done = subprocess.run(
        argv, env=env, cwd=ROOT, capture_output=True, text=True, timeout=timeout, check=False
    )
    if done.returncode != 0:
        raise AssertionError(
            f"{' '.join(argv)} exited {done.returncode}:\n"
            f"{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
        )
    return done.stdout


def _wait_for(condition: Callable[[], Any], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(1)


def _dotenv(path: Path, values: dict[str, str]) -> Path:
    path.write_text("".join(f"{name}={value}\n" for name, value in values.items()))
    return path


def _containers_conf(folder: Path) -> Path:
    """Podman's settings for these runs. A container's limits are this process's own: podman's
    defaults for a root container raise them, which a machine without CAP_SYS_RESOURCE refuses
    ("setrlimit RLIMIT_NOFILE: Operation not permitted"). runc where it is installed: crun
    cannot manage cgroups v1 beside v2 ("cgroups in hybrid mode not supported")."""
    nofile = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    lines = ["[containers]", f'default_ulimits = ["nofile={nofile}:{nofile}", "nproc=4096:4096"]']
    if shutil.which("runc", path=SEARCH_PATH):
        lines += ["[engine]", 'runtime = "runc"']
    path = folder / "containers.conf"
    path.write_text("\n".join(lines) + "\n")
    return path


@dataclass
class Podman:
    env: dict[str, str]
    compose: str

    def __call__(self, *args: str, timeout: float = 1200) -> str:
        return _run(["podman", *args], self.env, timeout)

    def succeeds(self, *args: str) -> bool:
        done = subprocess.run(["podman", *args], env=self.env, capture_output=True, check=False)
        return done.returncode == 0

    def image_id(self, tag: str) -> str | None:
        done = subprocess.run(
            ["podman", "image", "inspect", "--format", "{{.Id}}", tag],
            env=self.env,
            capture_output=True,
            text=True,
            check=False,
        )
        return done.stdout.strip() if done.returncode == 0 else None

    def rebuild(self, tag: str, argv: list[str], env: dict[str, str] | None = None) -> None:
        """Build ``tag`` with ``argv``, then remove the image it replaced (that one only: the
        machine's other images are not the test's)."""
        before = self.image_id(tag)
        _run(argv, env or self.env)
        if before is not None and before != self.image_id(tag):
            self.succeeds("rmi", before)


def _base_image(podman: Podman, folder: Path) -> str:
    """The Debian image every other is built from, made once: its tag names its recipe."""
    cas = sorted(LOCAL_CAS.glob("*.crt")) if LOCAL_CAS.is_dir() else []
    recipe = json.dumps([DEBIAN_SUITE, DEBIAN_PACKAGES, [ca.read_text() for ca in cas]])
    tag = f"{IMAGES}/debian:{DEBIAN_SUITE}-{hashlib.sha256(recipe.encode()).hexdigest()[:12]}"
    if podman.image_id(tag) is not None:
        return tag
    if shutil.which("mmdebstrap") is None:
        pytest.fail("mmdebstrap is not installed (Debian's package; .ci/run installs it)")
    hooks = []
    if cas:
        hooks = [
            f"--customize-hook=copy-in {LOCAL_CAS} /usr/local/share",
            '--customize-hook=chroot "$1" update-ca-certificates',
        ]
    rootfs = folder / "rootfs.tar"
    packages = f"--include={','.join(DEBIAN_PACKAGES)}"
    _run(
        ["mmdebstrap", "--variant=minbase", packages, *hooks, DEBIAN_SUITE, str(rootfs)], podman.env
    )
    podman("import", str(rootfs), tag)
    rootfs.unlink()
    return tag


def _build_images(podman: Podman, folder: Path) -> dict[str, str]:
    """compose.yaml's image variables, each naming an image built here."""
    base = _base_image(podman, folder)
    tried = subprocess.run(
        ["podman", "run", "--rm", base, "true"],
        env=podman.env,
        capture_output=True,
        text=True,
        check=False,
    )
    if tried.returncode != 0:
        why = f"podman cannot run a container here: {tried.stderr.strip()}"
        if os.environ.get("CI"):  # .ci/run installs what podman needs: a skip would hide it
            pytest.fail(why)
        pytest.skip(why)
    images = {
        "BASE_IMAGE": base,
        "PGBOUNCER_BASE_IMAGE": base,
        "LEDGER_IMAGE": f"{IMAGES}/ledger:latest",
        "PGBOUNCER_IMAGE": f"{IMAGES}/pgbouncer:latest",
        "POSTGRES_IMAGE": f"{IMAGES}/postgres:latest",
        "REDIS_IMAGE": f"{IMAGES}/redis:latest",
    }
    for target in ("postgres", "redis"):
        tag = images[f"{target.upper()}_IMAGE"]
        build = ["podman", "build", "-q", "--target", target, "--build-arg", f"BASE_IMAGE={base}"]
        build += ["-t", tag, "-f", str(HERE / "standins.Containerfile"), str(HERE)]
        podman.rebuild(tag, build)
    # The recipe's own builds, as `docker compose build` runs them.
    variables = _dotenv(folder / "build.env", {**PASSWORDS, **images})
    env = {**podman.env, **images}
    compose = [podman.compose, "--env-file", str(variables), "-f", "compose.yaml"]
    podman.rebuild(images["LEDGER_IMAGE"], [*compose, "build", "migrate"], env)
    podman.rebuild(
        images["PGBOUNCER_IMAGE"], [*compose, "--profile", "pgbouncer", "build", "pgbouncer"], env
    )
    return images


@pytest.fixture(scope="module")
def images(tmp_path_factory: pytest.TempPathFactory) -> tuple[Podman, dict[str, str]]:
    """Podman, and the images built for compose.yaml. Skips, quoting podman, only when podman
    is missing or cannot run a container on this machine."""
    if shutil.which("podman") is None:
        pytest.skip("podman is not installed (Debian's package; .ci/run installs it)")
    search = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    compose = shutil.which("podman-compose", path=search)
    if compose is None:
        pytest.fail("podman-compose is not installed (a dev dependency: make install)")
    folder = tmp_path_factory.mktemp("deploy")
    env = {**os.environ, "PATH": SEARCH_PATH, "CONTAINERS_CONF": str(_containers_conf(folder))}
    podman = Podman(env, compose)
    began = time.monotonic()
    with BUILD_LOCK.open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        built = _build_images(podman, folder)
    print(f"deploy: images built in {time.monotonic() - began:.0f} s", flush=True)
    return podman, built


@dataclass
class Stack:
    """One run of compose.yaml (with the sandbox of compose.smoke.yaml), its own project."""

    podman: Podman
    project: str
    pgbouncer: bool
    env: dict[str, str]
    variables: Path
    web_url: str
    sandbox_url: str

    def compose(self, *args: str) -> str:
        files = ["-f", "compose.yaml", "-f", str(HERE / "compose.smoke.yaml")]
        argv = [self.podman.compose, "--env-file", str(self.variables), "-p", self.project]
        return _run([*argv, *files, *args], self.env)

    def container(self, service: str) -> str:
        return f"{self.project}_{service}_1"  # podman-compose's name for a service's first

    def healthy(self, service: str) -> bool:
        """Runs the service's healthcheck as compose.yaml defines it."""
        return self.podman.succeeds("healthcheck", "run", self.container(service))

    def logs(self, service: str) -> str:
        """Everything the service wrote, its standard error (Celery's log, gunicorn's) too."""
        return subprocess.run(
            ["podman", "logs", self.container(service)],
            env=self.podman.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            timeout=60,
            check=False,
        ).stdout

    def manage(self, *args: str) -> str:
        """A management command in the web container, as an operator runs one."""
        return self.podman("exec", self.container("web"), "python", "manage.py", *args)

    def start(self) -> None:
        self.compose("up", "-d", "--no-deps", "postgres", "redis", "sandbox")
        _wait_for(lambda: self.healthy("postgres"), 90, "PostgreSQL's healthcheck")
        _wait_for(lambda: self.healthy("redis"), 30, "Redis's healthcheck")
        self.compose("up", "-d", "--no-deps", "migrate", *(["pgbouncer"] if self.pgbouncer else []))
        exit_code = self.podman("wait", self.container("migrate")).strip()
        assert exit_code == "0", self.logs("migrate")[-3000:]
        self.compose("up", "-d", "--no-deps", "web", "worker", "beat")
        _wait_for(lambda: self.healthy("web"), 120, "the web server's healthcheck (/healthz)")
        _wait_for(lambda: self._ready(), 60, "/readyz")
        _wait_for(self._worker_answers, 90, "the Celery worker")

    def _worker_answers(self) -> bool:
        """Whether the worker answers a ping (at production's log level it logs no "ready")."""
        ping = ["exec", self.container("worker"), "celery", "-A", "console", "inspect", "ping"]
        return self.podman.succeeds(*ping, "--timeout", "2")

    def _ready(self) -> bool:
        try:
            return httpx.get(f"{self.web_url}/readyz", timeout=5).status_code == 200
        except httpx.HTTPError:
            return False

    def stop(self) -> None:
        """Takes down whatever the project has (its containers, network and volumes)."""
        with contextlib.suppress(AssertionError, subprocess.TimeoutExpired):
            self.compose("--profile", "pgbouncer", "down", "-v", "-t", "5")
        label = f"label=io.podman.compose.project={self.project}"
        for kind in ("container", "volume", "network"):
            listed = subprocess.run(
                ["podman", kind, "ls", "-q", "--filter", label]
                + (["-a"] if kind == "container" else []),
                env=self.podman.env,
                capture_output=True,
                text=True,
                check=False,
            ).stdout.split()
            for name in listed:
                self.podman.succeeds(kind, "rm", "-f", name)


@pytest.fixture(params=["postgres", "pgbouncer"])
def stack(
    request: pytest.FixtureRequest,
    images: tuple[Podman, dict[str, str]],
    tmp_path: Path,
) -> Iterator[Stack]:
    """compose.yaml's stack from nothing: a project of its own, on free ports, straight to
    PostgreSQL or through PgBouncer."""
    podman, built = images
    pgbouncer = request.param == "pgbouncer"
    web_port, sandbox_port = free_port(), free_port()
    settings = _dotenv(
        tmp_path / "ledger.env", {**SETTINGS, **(PGBOUNCER_SETTINGS if pgbouncer else {})}
    )
    variables = {
        **PASSWORDS,
        **built,
        **(PGBOUNCER_VARIABLES if pgbouncer else {}),
        "LEDGER_ENV_FILE": str(settings),
        "LEDGER_PUBLISH": f"127.0.0.1:{web_port}",
        "SANDBOX_PUBLISH": f"127.0.0.1:{sandbox_port}",
    }
    stack = Stack(
        podman=podman,
        project=f"agent-ledger-drill-{os.getpid()}-{request.param}",
        pgbouncer=pgbouncer,
        env={**podman.env, **variables},
        variables=_dotenv(tmp_path / "compose.env", variables),
        web_url=f"http://127.0.0.1:{web_port}",
        sandbox_url=f"http://127.0.0.1:{sandbox_port}",
    )
    began = time.monotonic()
    try:
        stack.start()
        print(f"deploy: {request.param} stack ready in {time.monotonic() - began:.0f} s")
        yield stack
    finally:
        stack.stop()


def _uncertain_order(sandbox_url: str) -> Callable[[CallContext], Any]:
    """The tool: the order is created downstream, and its answer never arrives."""

    def execute(call: CallContext) -> Any:
        response = httpx.post(
            f"{sandbox_url}/orders/objects",
            json={**call.input, "reference": call.idempotency_key},
            headers={"Idempotency-Key": call.idempotency_key},
            timeout=0.5,
        )
        response.raise_for_status()
        return response.json()

    return execute


def test_the_stack_serves_and_its_worker_settles_an_uncertain_call(stack: Stack) -> None:
    ready = httpx.get(f"{stack.web_url}/readyz", timeout=10)
    assert ready.json() == {"status": "ready", "checks": {"database": "ok", "broker": "ok"}}
    assert httpx.get(f"{stack.web_url}/healthz", timeout=10).status_code == 200

    # The console, its static files collected into the image, and the API's own document.
    login = httpx.get(f"{stack.web_url}/login/", timeout=10)
    assert login.status_code == 200 and 'name="password"' in login.text
    static = re.findall(r'(?:href|src)="(/static/[^"]+)"', login.text)
    assert static, login.text[:2000]
    for path in static:
        assert httpx.get(f"{stack.web_url}{path}", timeout=10).status_code == 200, path
    assert httpx.get(f"{stack.web_url}/api/v1/openapi.json", timeout=10).status_code == 200

    # An operator's set-up: a runtime's token, the tool's downstream for look-ups.
    token = stack.manage(
        "issue_token", "smoke", "runtime", "--service-account", "smoke-agent", "--create-tenant"
    ).split()[-1]
    with LedgerClient(stack.web_url, token, request_timeout=15) as client:
        client.register_tool("create_order")
    stack.manage(
        "shell",
        "-c",
        "from ledger.models import Tool\n"
        "from reconcile.models import DownstreamAdapter\n"
        "tool = Tool.objects.get(tenant__slug='smoke', name='create_order')\n"
        "DownstreamAdapter.objects.create(tenant=tool.tenant, tool=tool,"
        " url_template='http://sandbox:8025/orders/objects/by-key/{key}',"
        " found_statuses=[200], not_found_statuses=[404])",
    )

    # The order is created, the answer lost: the worker looks it up in the sandbox.
    httpx.post(
        f"{stack.sandbox_url}/_faults",
        json={"service": "orders", "mode": "timeout_after_commit", "hang_seconds": 1.5},
        timeout=5,
    ).raise_for_status()
    tool = _uncertain_order(stack.sandbox_url)
    with (
        LedgerClient(stack.web_url, token, request_timeout=15) as client,
        client.run(user_id="smoke") as run,
    ):
        first = run.call(
            "create_order", {"cart": "c-1"}, business_object_id="c-1", execute=tool, timeout=0.5
        )
        assert first["code"] == "SIDE_EFFECT_UNCERTAIN", first
        key = first["metadata"]["idempotency_key"]
        record: dict[str, Any] = {}

        def settled() -> bool:
            record.update(client.lookup(key) or {})
            return record.get("state") != "unknown"

        _wait_for(settled, SETTLED_WITHIN_SECONDS, "the worker's look-up")
        assert record["state"] == "succeeded", record
        assert record["result"]["reconciled"] == "found", record
        ran_again: list[str] = []
        retry = run.call(
            "create_order",
            {"cart": "c-1"},
            business_object_id="c-1",
            execute=lambda call: ran_again.append(call.idempotency_key),
        )
        assert retry["ok"] is True and retry["metadata"]["replayed"] is True, retry
        assert not ran_again
    orders = httpx.get(f"{stack.sandbox_url}/orders/stats", timeout=5).json()
    assert orders["lookups_per_key"].get(key, 0) >= 1, orders
    assert orders["create_requests_per_key"][key] == 1, orders

    # The serving role owns nothing; the schema's owner ran the migrations.
    owners = stack.podman(
        "exec",
        stack.container("postgres"),
        "psql",
        "-U",
        "postgres",
        "-d",
        "ledger",
        "-Atc",
        "SELECT DISTINCT tableowner FROM pg_tables WHERE schemaname = 'public'",
    )
    assert owners.split() == ["ledger_owner"], owners
    if stack.pgbouncer:
        assert "login attempt: db=ledger user=ledger" in stack.logs("pgbouncer")
    for service in ("migrate", "web", "worker", "beat"):
        trouble = [line for line in stack.logs(service).splitlines() if TROUBLE.search(line)]
        assert not trouble, (service, trouble[:10])
