"""The TypeScript client (clients/typescript): type-checked strictly and built into a temporary
folder (nothing is written into the source tree), then its tests run with Node's test runner:
the protocol's without I/O, and the live ones against this ledger and the sandbox."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest
from django.test import Client

from ledger.models import PolicyRule, Tenant
from sandbox.server import SandboxServer
from tests.client.approving import approver_token, large_orders_policy
from tests.client.case_table import TABLE, cases
from tests.shared_builds import once_per_run

PACKAGE = Path(__file__).resolve().parents[2] / "clients" / "typescript"
TSC = PACKAGE / "node_modules" / ".bin" / "tsc"
SHIM = Path(__file__).with_name("mcp_shim.py")
GUIDE = PACKAGE.parents[1] / "docs" / "integrations.md"
EXAMPLE = re.compile(r"<!-- example: ([\w-]+) -->\n```js\n(.*?)```", re.S)
MEMORY = "@modelcontextprotocol/server-memory"
FILESYSTEM = "@modelcontextprotocol/server-filesystem"
# The suites run under the policy "approve create_order when amount > 100", with an approver
# (the MCP suite adds a policy of its own).
APPROVING = {
    "approvals.test.js",
    "ai-sdk.test.js",
    "langgraph.test.js",
    "openai-agents.test.js",
    "mcp.test.js",
}


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory, worker_id: str) -> Path:
    """The package and its tests compiled by ``tsc`` under the package's strict settings, once
    a test run (the xdist workers share it)."""
    if not TSC.exists():
        pytest.fail("clients/typescript has no node_modules: `make test` installs them (npm ci)")

    def build(folder: Path) -> None:
        # The tests import their frameworks (ai, zod) by name: Node finds them beside the build.
        (folder / "node_modules").symlink_to(PACKAGE / "node_modules")
        checked = subprocess.run(
            [str(TSC), "-p", str(PACKAGE), "--outDir", str(folder / "dist")],
            capture_output=True,
            text=True,
            check=False,
        )
        assert checked.returncode == 0, checked.stdout + checked.stderr

    return once_per_run(tmp_path_factory, worker_id, "typescript-build", build) / "dist"


def test_the_generated_types_match_the_served_openapi_document(tmp_path: Path) -> None:
    """src/openapi.ts is openapi-typescript's output for the document the API serves; after an
    API change, `make typescript-types` writes it again."""
    served = Client().get("/api/v1/openapi.json", secure=True)
    assert served.status_code == 200
    (tmp_path / "openapi.json").write_bytes(served.content)
    generated = subprocess.run(
        [
            str(PACKAGE / "node_modules" / ".bin" / "openapi-typescript"),
            "openapi.json",
            "-o",
            "t.ts",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=False,
    )
    assert generated.returncode == 0, generated.stderr
    committed = (PACKAGE / "src" / "openapi.ts").read_text()
    assert (tmp_path / "t.ts").read_text() == committed, "run `make typescript-types`"


def _node_test(script: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["node", "--test", "--test-reporter=tap", str(script)],
        capture_output=True,
        text=True,
        env={**os.environ, **env},
        timeout=180,
        check=False,
    )


@pytest.mark.parametrize("script", ["protocol.test.js", "file-writes.test.js"])
def test_the_parts_without_a_server(built: Path, script: str) -> None:
    """The protocol's decisions on scripted answers, and the MCP guard's write plans on files
    in a temporary folder."""
    result = _node_test(built / "test" / script)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "# fail 0" in result.stdout and "# pass 0" not in result.stdout


def _mcp_server(folder: Path) -> dict[str, str]:
    """The official memory and filesystem servers, each behind the fault shim: the memory
    server keeps its graph in ``folder``, the filesystem server serves ``folder/files``, whose
    writes the tenant's policy makes conditional (settled by the file's hash)."""
    faults, log, files = folder / "faults.json", folder / "calls.jsonl", folder / "files"
    faults.write_text("{}")
    log.write_text("")
    files.mkdir()
    shim = [sys.executable, str(SHIM), "--faults", str(faults), "--log", str(log), "--"]
    memory = ["env", f"MEMORY_FILE_PATH={folder / 'memory.jsonl'}", "npx", "-y", MEMORY]
    PolicyRule.objects.create(
        tenant=Tenant.objects.get(),
        pattern="fs/write_file",
        idempotency="conditional",
        reason="file writes are settled by the file's hash",
    )
    return {
        "MCP_COMMAND": json.dumps([*shim, *memory]),
        "FS_COMMAND": json.dumps([*shim, "npx", "-y", FILESYSTEM, str(files)]),
        "FS_ROOT": str(files),
        "MCP_FAULTS": str(faults),
        "MCP_LOG": str(log),
    }


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    ("script", "tests"),
    [
        ("live.test.js", 5),
        # The framework adapters at full size run in make drill (docs/testing.md); the client,
        # its approvals and the shared case table stand for them in make test.
        pytest.param("ai-sdk.test.js", 9, marks=pytest.mark.scale),
        pytest.param("openai-agents.test.js", 9, marks=pytest.mark.scale),
        ("approvals.test.js", 3),
        pytest.param("langgraph.test.js", 9, marks=pytest.mark.scale),
        ("cases.test.js", len(cases()) + 1),
        pytest.param(
            "mcp.test.js",
            8,
            marks=[
                pytest.mark.scale,
                pytest.mark.skipif(shutil.which("npx") is None, reason="the server needs npx"),
            ],
        ),
    ],
    ids=[
        "client",
        "vercel-ai-sdk",
        "openai-agents",
        "approvals",
        "langgraph",
        "case-table",
        "mcp-sdk",
    ],
)
def test_against_a_live_ledger_and_the_sandbox(
    script: str,
    tests: int,
    built: Path,
    live_server: Any,
    ledger_token: str,
    sandbox: SandboxServer,
    tmp_path: Path,
) -> None:
    result = _node_test(
        built / "test" / script,
        LEDGER_URL=live_server.url,
        LEDGER_TOKEN=ledger_token,
        SANDBOX_URL=sandbox.url,
        CASES=str(TABLE),
        **(_mcp_server(tmp_path) if script == "mcp.test.js" else {}),
        **(_approver(live_server.url, ledger_token) if script in APPROVING else {}),
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "# skipped 0" in result.stdout and f"# pass {tests}" in result.stdout, result.stdout


@pytest.mark.django_db(transaction=True)
def test_the_runtimes_active_span_reaches_the_ledger(
    built: Path, live_server: Any, ledger_token: str, spans: Any
) -> None:
    """The client reads the ambient OpenTelemetry context (`src/trace.ts`): the ledger's spans of
    a call made under the runtime's span are in that span's trace."""
    trace_id = "4bf92f3577b34da6a3ce929d0e0e4737"
    result = _node_test(
        built / "test" / "trace.test.js",
        LEDGER_URL=live_server.url,
        LEDGER_TOKEN=ledger_token,
        TRACE_ID=trace_id,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "# skipped 0" in result.stdout and "# pass 2" in result.stdout, result.stdout
    decided = [s for s in spans.get_finished_spans() if s.name == "execute_tool read_file"]
    assert decided, [s.name for s in spans.get_finished_spans()]
    assert {format(s.context.trace_id, "032x") for s in decided} == {trace_id}


def _npm(*args: str, cwd: Path) -> str:
    done = subprocess.run(
        ["npm", *args, "--no-audit", "--no-fund", "--loglevel=error"],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


@pytest.fixture(scope="module")
def fresh_project(tmp_path_factory: pytest.TempPathFactory, worker_id: str) -> Path:
    """The package as `npm pack` makes it, installed with the AI SDK and zod (as the guide says)
    into an empty folder outside the repository, once a test run; built from a copy, so nothing
    is written into the source tree."""

    def build(work: Path) -> None:
        copy = work / "package"
        shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("node_modules", "dist"))
        (copy / "node_modules").symlink_to(PACKAGE / "node_modules")
        done = subprocess.run([str(TSC), "-p", str(copy)], capture_output=True, text=True)
        assert done.returncode == 0, done.stdout + done.stderr
        tarball = _npm("pack", "--pack-destination", str(work), cwd=copy).strip().splitlines()[-1]
        project = work / "project"
        project.mkdir()
        _npm("init", "-y", cwd=project)
        _npm("install", str(work / tarball), "ai@6", "zod@4", cwd=project)

    return once_per_run(tmp_path_factory, worker_id, "typescript-guide", build) / "project"


def _orders(sandbox: SandboxServer, reference: str) -> int:
    stats = httpx.get(f"{sandbox.url}/orders/stats").json()
    return int(stats["per_reference"].get(reference, 0))


def _approver(url: str, token: str) -> dict[str, str]:
    """The policy "approve create_order when amount > 100", and a token of a person with the
    approver role (none of the action's principals)."""
    large_orders_policy(url, token)
    return {"APPROVER_TOKEN": approver_token()}


# Each example of the guide, what it prints, and the order it leaves at the sandbox.
GUIDE_EXAMPLES = [("ts-client", "true true", "cart-42"), ("ts-ai-sdk", "true Ordered.", "cart-7")]


def test_every_typescript_example_of_the_guide_is_checked() -> None:
    assert {name for name, _ in EXAMPLE.findall(GUIDE.read_text())} == {
        name for name, _, _ in GUIDE_EXAMPLES
    }


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(("name", "printed", "reference"), GUIDE_EXAMPLES)
def test_the_guides_typescript_examples_run_verbatim(
    name: str,
    printed: str,
    reference: str,
    fresh_project: Path,
    live_server: Any,
    ledger_token: str,
    sandbox: SandboxServer,
) -> None:
    examples = dict(EXAMPLE.findall(GUIDE.read_text()))
    script = fresh_project / f"{name}.mjs"
    script.write_text(examples[name])
    env = {"LEDGER_URL": live_server.url, "LEDGER_TOKEN": ledger_token, "SANDBOX_URL": sandbox.url}
    done = subprocess.run(
        ["node", str(script)],
        cwd=fresh_project,
        capture_output=True,
        text=True,
        env={**os.environ, **env},
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.strip() == printed
    assert _orders(sandbox, reference) == 1
