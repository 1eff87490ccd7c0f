"""Every example in docs/api.md, docs/integrations.md and docs/rollout.md, run verbatim as a
new user would, from an empty temporary folder against a live server: in `make test` with the
project's own environment (the client installed from its folder with its extras), and at full
size (`scale`, `make drill`) with the client's wheel built and installed with its extras into a
fresh virtual environment outside the repository."""

from __future__ import annotations

import json
import re
import shutil
import socket
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from ledger.models import Run
from sandbox.server import SandboxServer
from tests.client.approving import approver_token, large_orders_policy, orders
from tests.client.shadowing import candidate_in_shadow
from tests.sandbox_fixtures import arm

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[2]
GUIDES = [ROOT / "docs" / name for name in ("api.md", "integrations.md", "rollout.md")]
EXAMPLE = re.compile(r"<!-- example: ([\w-]+) -->\n```python\n(.*?)```", re.S)


def _examples() -> dict[str, str]:
    found: dict[str, str] = {}
    for guide in GUIDES:
        if guide.exists():
            found.update(EXAMPLE.findall(guide.read_text()))
    return found


@dataclass
class Python:
    python: Path
    folder: Path

    def run(self, code: str, **env: str) -> str:
        result = subprocess.run(
            [str(self.python), "-c", code],
            cwd=self.folder,
            capture_output=True,
            text=True,
            timeout=180,
            env={"PATH": f"{self.python.parent}:/usr/bin:/bin", "HOME": str(self.folder), **env},
            check=False,
        )
        assert result.returncode == 0, result.stderr[-3000:]
        return result.stdout


Check = Callable[["Python", str, str, SandboxServer], None]


@pytest.fixture(scope="module")
def fresh_venv(tmp_path_factory: pytest.TempPathFactory) -> Python:
    """The wheel, installed with all its extras (and the git MCP server the MCP example
    starts) into a virtual environment that has never seen the repository."""
    base = tmp_path_factory.mktemp("fresh")
    wheels = base / "wheels"
    pip = [sys.executable, "-m", "pip", "--quiet"]
    source = base / "client"  # built from a copy, so the build writes nothing into the repo
    shutil.copytree(ROOT / "client", source, ignore=shutil.ignore_patterns("build", "*.egg-info"))
    subprocess.run(
        [*pip, "wheel", "--no-deps", "-w", str(wheels), str(source)],
        check=True,
        capture_output=True,
    )
    (wheel,) = wheels.glob("agent_ledger_client-*.whl")
    subprocess.run([sys.executable, "-m", "venv", str(base / "venv")], check=True)
    python = base / "venv" / "bin" / "python"
    subprocess.run(
        [
            str(python),
            "-m",
            "pip",
            "install",
            "--quiet",
            f"{wheel}[mcp,langgraph,openai-agents,pydantic-ai]",
            "mcp-server-git",
        ],
        check=True,
        capture_output=True,
    )
    folder = base / "work"
    folder.mkdir()
    return Python(python, folder)


@pytest.fixture(scope="module")
def project_python(tmp_path_factory: pytest.TempPathFactory) -> Python:
    """The interpreter of the test run, which has the client and the git MCP server installed
    (`make install`), in an empty folder outside the repository."""
    return Python(Path(sys.executable), tmp_path_factory.mktemp("project"))


@pytest.fixture(
    scope="module", params=["project_python", pytest.param("fresh_venv", marks=pytest.mark.scale)]
)
def venv(request: pytest.FixtureRequest) -> Python:
    """Where the examples run: the project's environment, and (``scale``) the fresh one."""
    python: Python = request.getfixturevalue(request.param)
    return python


@pytest.mark.scale
def test_the_wheel_installs_outside_the_repository(fresh_venv: Python) -> None:
    out = fresh_venv.run(
        "import agent_ledger_client, sys; "
        "print(agent_ledger_client.__file__); print('django' in sys.modules)"
    )
    installed, django = out.split()
    assert installed.startswith(str(fresh_venv.python.parents[1])) and not installed.startswith(
        str(ROOT)
    )
    assert django == "False"
    typed = Path(installed).parent / "py.typed"
    assert typed.exists()


def _ordering(name: str, printed: str) -> Check:
    """An example that orders cart-42 twice through the sandbox: it prints ``printed`` and
    leaves one order downstream."""

    def check(venv: Python, server: str, token: str, sandbox: SandboxServer) -> None:
        out = venv.run(
            _examples()[name], LEDGER_URL=server, LEDGER_TOKEN=token, SANDBOX_URL=sandbox.url
        )
        assert out.strip() == printed
        assert httpx.get(f"{sandbox.url}/orders/stats").json()["objects"] == 1

    return check


def _mcp_example(venv: Python, server: str, token: str, sandbox: SandboxServer) -> None:
    repo = venv.folder / "repo"
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    out = venv.run(_examples()["mcp"], LEDGER_URL=server, LEDGER_TOKEN=token, REPO=str(repo))
    assert out.startswith("False") and "Repository status" in out


def _proxy_example(venv: Python, server: str, token: str, sandbox: SandboxServer) -> None:
    repo = venv.folder / "proxied"
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    out = venv.run(_examples()["proxy"], LEDGER_URL=server, LEDGER_TOKEN=token, REPO=str(repo))
    assert out.split() == ["False", "True"]


def _proxy_http_example(venv: Python, server: str, token: str, sandbox: SandboxServer) -> None:
    repo = venv.folder / "proxied-http"
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = str(probe.getsockname()[1])
    out = venv.run(
        _examples()["proxy-http"],
        LEDGER_URL=server,
        LEDGER_TOKEN=token,
        REPO=str(repo),
        PROXY_PORT=port,
    )
    assert out.split() == ["False", "True"]


def _mirroring(name: str, printed: list[str]) -> Check:
    """An example that mirrors a live order into a shadow run, once a manager has put a
    candidate in shadow: it prints ``printed``, and only the live order reaches the sandbox."""

    def check(venv: Python, server: str, token: str, sandbox: SandboxServer) -> None:
        candidate = candidate_in_shadow()
        out = venv.run(
            _examples()[name], LEDGER_URL=server, LEDGER_TOKEN=token, SANDBOX_URL=sandbox.url
        )
        assert out.split() == printed
        assert httpx.get(f"{sandbox.url}/orders/stats").json()["objects"] == 1
        shadow = Run.objects.get(shadow_of__run_id="conversation-1")
        assert (shadow.run_id, shadow.combination_id) == ("conversation-1.shadow", candidate.pk)

    return check


def _approving(name: str, printed: list[str], ordered: dict[str, int]) -> Check:
    """An example that orders 500 under a manager's policy "approve create_order when amount >
    100", decided by a person whose token is ``APPROVER_TOKEN``: it prints ``printed``, and
    the sandbox has ``ordered``."""

    def check(venv: Python, server: str, token: str, sandbox: SandboxServer) -> None:
        large_orders_policy(server, token)
        out = venv.run(
            _examples()[name],
            LEDGER_URL=server,
            LEDGER_TOKEN=token,
            APPROVER_TOKEN=approver_token(),
            SANDBOX_URL=sandbox.url,
        )
        assert out.split() == printed
        assert orders(sandbox) == ordered

    return check


CHECKS: dict[str, Check] = {
    "client": _ordering("client", "True True"),
    "mcp": _mcp_example,
    "proxy": _proxy_example,
    "proxy-http": _proxy_http_example,
    "langgraph": _ordering("langgraph", "[False, True]"),
    "pydantic-ai": _ordering("pydantic-ai", "done"),
    "openai-agents": _ordering("openai-agents", "done True"),
    "langgraph-approval": _approving(
        "langgraph-approval", ["APPROVAL_REQUIRED", "['success']"], {"amount-500": 1}
    ),
    "pydantic-ai-approval": _approving("pydantic-ai-approval", ["APPROVAL_REQUIRED", "True"], {}),
    "openai-agents-approval": _approving(
        "openai-agents-approval", ["APPROVAL_REQUIRED", "done"], {"amount-500": 1}
    ),
    "mirror": _mirroring(
        "mirror", ["None", "SHADOW_DRY_RUN", "conversation-1.shadow", "conversation-1"]
    ),
    "mirror-pydantic-ai": _mirroring("mirror-pydantic-ai", ["ordered", "SHADOW_DRY_RUN"]),
}


def test_the_proxy_configuration_is_the_example_s_command() -> None:
    """The JSON configuration in docs/integrations.md starts what the proxy example starts."""
    guide = (ROOT / "docs" / "integrations.md").read_text()
    block = re.search(r"<!-- config: proxy -->\n```json\n(.*?)```", guide, re.S)
    assert block, "docs/integrations.md has no proxy configuration"
    server = json.loads(block.group(1))["mcpServers"]["git"]
    example = _examples()["proxy"]
    assert f'command="{server["command"]}"' in example
    flags = [arg for arg in server["args"] if arg.startswith("-")]
    assert all(f'"{flag}"' in example for flag in flags)
    assert set(server["env"]) == {"LEDGER_TOKEN"}


def test_the_http_configuration_is_the_example_s_endpoint() -> None:
    """The URL configuration in docs/integrations.md is where the HTTP example connects."""
    guide = (ROOT / "docs" / "integrations.md").read_text()
    block = re.search(r"<!-- config: proxy-http -->\n```json\n(.*?)```", guide, re.S)
    assert block, "docs/integrations.md has no streamable-HTTP configuration"
    url = json.loads(block.group(1))["mcpServers"]["git"]["url"]
    example = _examples()["proxy-http"]
    assert url == "http://127.0.0.1:8765/mcp"
    assert '"PROXY_PORT", "8765"' in example and 'f"http://127.0.0.1:{port}/mcp"' in example
    assert '"--http", f"127.0.0.1:{port}"' in example and "--http 127.0.0.1:8765" in guide


def test_every_example_is_checked() -> None:
    assert set(_examples()) == set(CHECKS)


@pytest.mark.parametrize("name", sorted(CHECKS))
def test_example_runs_verbatim(
    name: str, venv: Python, live_server, ledger_token: str, sandbox: SandboxServer
) -> None:
    CHECKS[name](venv, live_server.url, ledger_token, sandbox)


def test_the_client_example_survives_a_timeout_after_commit(
    venv: Python, live_server, ledger_token: str, sandbox: SandboxServer
) -> None:
    arm(sandbox, service="orders", mode="timeout_after_commit", hang_seconds=7)
    out = venv.run(
        _examples()["client"],
        LEDGER_URL=live_server.url,
        LEDGER_TOKEN=ledger_token,
        SANDBOX_URL=sandbox.url,
    )
    assert out.strip() == "False False"  # uncertain, and the retry is refused, not replayed
    assert httpx.get(f"{sandbox.url}/orders/stats").json()["objects"] == 1


@pytest.mark.parametrize("name", ["client", "mcp", "proxy"])
def test_examples_are_under_thirty_lines(name: str) -> None:
    lines = [line for line in _examples()[name].splitlines() if line.strip()]
    assert len(lines) < 30
