"""The integrations in docs/api.md are run as written, so they cannot rot."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from sandbox.server import SandboxServer

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[2]
GUIDE = (ROOT / "docs" / "api.md").read_text()


def _example(name: str) -> str:
    match = re.search(rf"<!-- example: {name} -->\n```python\n(.*?)```", GUIDE, re.S)
    assert match, f"docs/api.md has no example {name!r}"
    return match.group(1)


def _run(code: str, **env: str) -> str:
    result = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **env},
        check=False,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


@pytest.mark.parametrize("name", ["client", "mcp"])
def test_examples_are_under_thirty_lines(name: str) -> None:
    lines = [line for line in _example(name).splitlines() if line.strip()]
    assert len(lines) < 30


def test_client_example_runs(live_server, ledger_token: str, sandbox: SandboxServer) -> None:
    out = _run(
        _example("client"),
        LEDGER_URL=live_server.url,
        LEDGER_TOKEN=ledger_token,
        SANDBOX_URL=sandbox.url,
    )
    assert out.strip() == "True True"


def test_mcp_example_runs(live_server, ledger_token: str, tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    out = _run(
        _example("mcp"), LEDGER_URL=live_server.url, LEDGER_TOKEN=ledger_token, REPO=str(repo)
    )
    assert out.startswith("False") and "Repository status" in out
