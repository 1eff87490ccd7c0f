"""The proxy's ledger run comes from its configuration (``--run-id``, else
``AGENT_LEDGER_RUN_ID``, else a default derived from the server, the user and the upstream
command), outlives the connections and the process, and is resumed when the proxy starts again;
a run that has ended is told to the MCP client as a tool result, never a protocol error."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
from mcp import ClientSession

from agent_ledger_client.mcp_guard import LEDGER_META_KEY
from agent_ledger_client.mcp_proxy import RUN_ID_VARIABLE, default_run_id
from ledger import combinations
from ledger.models import Run, Tenant
from ledger.services.runs import finish_run, start_run
from tests.client.test_mcp_guard_servers import Shim
from tests.client.test_mcp_proxy import GIT, _proxied

#: The ledger's pattern for a run id (``ledger.api.schemas.RunIn``).
RUN_ID = re.compile(r"^[^\x00-\x1f\x7f:]{1,200}$")


@pytest.fixture
def shim(tmp_path: Path) -> Shim:
    return Shim(tmp_path)


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    folder = tmp_path / "repo"
    subprocess.run(["git", "init", "-q", "-b", "main", str(folder)], check=True)
    for args in (["config", "user.email", "a@example.com"], ["config", "user.name", "Agent"]):
        subprocess.run(["git", "-C", str(folder), *args], check=True)
    (folder / "README.md").write_text("hello\n")
    subprocess.run(["git", "-C", str(folder), "add", "README.md"], check=True)
    subprocess.run(["git", "-C", str(folder), "commit", "-q", "-m", "first"], check=True)
    return folder


def _session(
    live_server: Any,
    token: str,
    shim: Shim,
    repo: Path,
    name: str,
    arguments: dict[str, Any],
    *options: str,
    environment: dict[str, str] | None = None,
) -> Any:
    """One MCP client session with a proxy process of its own: one call of ``name``."""

    async def scenario(session: ClientSession) -> Any:
        return await session.call_tool(name, arguments)

    upstream = [*GIT, "--repository", str(repo)]
    return _proxied(
        live_server,
        token,
        shim,
        upstream,
        scenario,
        "--server",
        "git",
        *options,
        environment={RUN_ID_VARIABLE: "", **(environment or {})},
    )


def _branches(repo: Path) -> list[str]:
    listed = subprocess.run(
        ["git", "-C", str(repo), "branch", "--format=%(refname:short)"],
        capture_output=True,
        text=True,
        check=True,
    )
    return listed.stdout.split()


@pytest.mark.django_db(transaction=True)
@pytest.mark.slow
@pytest.mark.parametrize(
    ("options", "environment", "run_id"),
    [
        pytest.param(["--run-id", "task-7"], {}, "task-7", id="--run-id"),
        pytest.param([], {RUN_ID_VARIABLE: "task-7"}, "task-7", id=RUN_ID_VARIABLE),
        pytest.param([], {}, None, id="default"),
    ],
)
def test_a_restarted_proxy_resumes_its_run_and_a_write_runs_once(
    options: list[str],
    environment: dict[str, str],
    run_id: str | None,
    live_server,
    ledger_token: str,
    shim: Shim,
    repo: Path,
) -> None:
    branch = {"repo_path": str(repo), "branch_name": "feature"}
    first, again = (
        _session(
            live_server,
            ledger_token,
            shim,
            repo,
            "git_create_branch",
            branch,
            *options,
            environment=environment,
        )
        for _proxy_process in range(2)
    )
    assert first.is_error is not True and again.is_error is not True, again
    assert again.meta[LEDGER_META_KEY]["replayed"] is True
    assert len(shim.calls("git_create_branch")) == 1 and _branches(repo) == ["feature", "main"]
    run = Run.objects.get()  # one run for both processes, still open
    assert run.status == Run.Status.RUNNING and run.finished_at is None
    expected = run_id or default_run_id(
        server="git", user_id="mcp-user", upstream=shim.command([*GIT, "--repository", str(repo)])
    )
    assert run.run_id == expected


def test_the_default_run_id_is_stable_and_follows_the_configuration() -> None:
    upstream = ["python", "-m", "mcp_server_git", "--repository", "/srv/repo"]
    named = default_run_id(server="git", user_id="u-1", upstream=upstream)
    assert named == default_run_id(server="git", user_id="u-1", upstream=list(upstream))
    assert named.startswith("mcp.git.u-1.") and RUN_ID.match(named)
    others = {
        default_run_id(server="fs", user_id="u-1", upstream=upstream),
        default_run_id(server="git", user_id="u-2", upstream=upstream),
        default_run_id(server="git", user_id="u-1", upstream=[*upstream[:-1], "/srv/other"]),
        default_run_id(server="git", user_id="u-1", upstream=upstream, shadow_of="live-1"),
    }
    assert named not in others and len(others) == 4
    odd = default_run_id(server="a:b\n" * 100, user_id="c:d" * 100, upstream=upstream)
    assert RUN_ID.match(odd), odd


def _observation(result: Any) -> dict[str, Any]:
    (content,) = result.content
    observation: dict[str, Any] = json.loads(content.text)
    return observation


@pytest.mark.django_db(transaction=True)
@pytest.mark.slow
def test_a_finished_run_is_a_tool_result_carrying_the_ledger_s_answer(
    live_server, ledger_token: str, shim: Shim, repo: Path
) -> None:
    tenant = Tenant.objects.get(slug="acme")
    run, _ = start_run(tenant=tenant, user_id="mcp-user", actor="test", run_id="task-done")
    finish_run(run=run, termination_reason="completed", actor="test")

    result = _session(
        live_server,
        ledger_token,
        shim,
        repo,
        "git_create_branch",
        {"repo_path": str(repo), "branch_name": "late"},
        "--run-id",
        "task-done",
    )
    observation = _observation(result)
    assert result.is_error is True and result.meta[LEDGER_META_KEY]["code"] == "RUN_FINISHED"
    assert observation["code"] == "RUN_FINISHED" and "task-done" in observation["content"]
    assert observation["metadata"]["next_action"] == "stop"
    assert shim.calls("git_create_branch") == [] and "late" not in _branches(repo)


@pytest.mark.django_db(transaction=True)
@pytest.mark.slow
def test_a_run_refused_under_a_halted_combination_is_a_tool_result(
    live_server, ledger_token: str, shim: Shim, repo: Path
) -> None:
    tenant = Tenant.objects.get(slug="acme")
    baseline, _ = combinations.create_combination(
        tenant=tenant,
        label="baseline",
        actor="test",
        source="system",
        model="m",
        prompt="p",
        rules="r",
        tool_schema="t",
        data_version="d",
    )
    combinations.activate(tenant=tenant, combination_id=baseline.pk, actor="test", source="system")
    combinations.halt(
        tenant=tenant, combination_id=baseline.pk, actor="test", source="system", reason="drill"
    )

    result = _session(
        live_server,
        ledger_token,
        shim,
        repo,
        "git_create_branch",
        {"repo_path": str(repo), "branch_name": "halted"},
    )
    observation = _observation(result)
    assert result.is_error is True and observation["code"] == "RUN_HALTED"
    assert observation["metadata"]["next_action"] == "stop"
    assert shim.calls("git_create_branch") == [] and "halted" not in _branches(repo)
