"""``classify --report`` and the capture script, run verbatim as docs/classification.md shows."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = (ROOT / "docs" / "classification.md").read_text()
README = (ROOT / "README.md").read_text()


def _shell_lines(text: str, marker: str) -> list[str]:
    blocks = re.findall(r"```sh\n(.*?)```", text, flags=re.DOTALL)
    return [line for block in blocks for line in block.splitlines() if marker in line]


def _run(line: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "DJANGO_ALLOW_ASYNC_UNSAFE"}
    return subprocess.run(  # noqa: S602 - the documented command, verbatim
        line, shell=True, cwd=ROOT, capture_output=True, text=True, env=env, timeout=300
    )


REPORTS = sorted(set(_shell_lines(DOCS, "--report") + _shell_lines(README, "--report")))


def test_the_docs_show_report_examples() -> None:
    assert len(REPORTS) >= 2


@pytest.mark.parametrize("line", REPORTS)
def test_the_report_names_each_tool_its_class_and_what_trust_changes(line: str) -> None:
    result = _run(line)
    assert result.returncode == 0, result.stderr
    path = ROOT / re.search(r"--mcp (\S+)", line).group(1)  # type: ignore[union-attr]
    names = [t["name"] for t in json.loads(path.read_text())["tools"]]
    rows = [r for r in result.stdout.splitlines() if r.startswith("| ") and "---" not in r]
    assert [r.split(" | ")[0].removeprefix("| ") for r in rows[1:]] == names
    other = "untrusted" if "--trust trusted" in line else "trusted"
    assert rows[0] == f"| tool | class | decided by | registered {other} |"
    assert f"{len(names)} tools:" in result.stdout


def test_the_filesystem_report_says_what_decides_write_file_and_create_directory() -> None:
    (line,) = [r for r in REPORTS if "server_filesystem" in r]
    rows = {r.split(" | ")[0].removeprefix("| "): r for r in _run(line).stdout.splitlines()}
    assert "workspace root covers 'path'" in rows["write_file"]
    assert "idempotent/auto (mcp.directory_creation.idempotent)" in rows["create_directory"]
    assert rows["directory_tree"].split(" | ")[1] == "idempotent/auto"


def test_report_refuses_command_lists() -> None:
    result = _run("DEBUG=true .venv/bin/python manage.py classify --commands - --report")
    assert result.returncode != 0 and "only apply to --mcp" in result.stderr


@pytest.mark.slow
def test_the_capture_script_matches_the_stored_catalogue() -> None:
    """The documented re-capture (one real server from the registry) lists the stored tools."""
    (line,) = _shell_lines(DOCS, "capture_mcp_catalogues.py")
    out = Path(re.search(r"--out (\S+)", line).group(1))  # type: ignore[union-attr]
    result = _run(line)
    assert result.returncode == 0, result.stderr
    fresh = json.loads((out / "server_memory_tools_list.json").read_text())
    stored = json.loads((ROOT / "tests/fixtures/mcp/server_memory_tools_list.json").read_text())
    assert [t["name"] for t in fresh["tools"]] == [t["name"] for t in stored["tools"]]
    manifest = json.loads((out / "catalogues.json").read_text())
    assert manifest["server_memory_tools_list.json"]["registry"] == "npm"


def _import_filesystem(tenant) -> None:
    from ledger.domain import ServerTrust
    from ledger.services.registry import import_mcp_tools

    import_mcp_tools(
        tenant=tenant,
        server_name="fs",
        trust=ServerTrust.UNTRUSTED,
        tools_list=json.loads(
            (ROOT / "tests/fixtures/mcp/server_filesystem_tools_list.json").read_text()
        ),
        actor="alice",
        source="api",
    )


@pytest.mark.django_db
def test_the_report_of_an_imported_server_shows_the_registrys_classes(tenant) -> None:
    from io import StringIO

    from django.core.management import call_command

    from ledger.domain import Idempotency
    from ledger.models import Tool
    from ledger.services.registry import override_tool

    _import_filesystem(tenant)
    override_tool(
        tool=Tool.objects.get(tenant=tenant, name="fs/move_file"),
        idempotency=Idempotency.CONDITIONAL,
        reason="moves inside the sandbox are checked by hand",
        actor="bob",
        source="console",
    )
    out = StringIO()
    call_command("classify", "--server", "fs", "--tenant", tenant.slug, "--report", stdout=out)
    rows = {r.split(" | ")[0].removeprefix("| "): r for r in out.getvalue().splitlines()}
    assert "override: Overridden by bob" in rows["move_file"]
    assert rows["directory_tree"].split(" | ")[1] == "idempotent/auto"
    assert "idempotent/auto (mcp.directory_creation.idempotent)" in rows["create_directory"]
    assert "registered untrusted" in out.getvalue().splitlines()[0]


@pytest.mark.django_db
def test_the_report_of_another_tenants_server_is_refused(tenant, other_tenant) -> None:
    from django.core.management import call_command
    from django.core.management.base import CommandError

    _import_filesystem(other_tenant)
    with pytest.raises(CommandError, match="has imported no MCP server"):
        call_command("classify", "--server", "fs", "--tenant", tenant.slug, "--report")
