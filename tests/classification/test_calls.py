"""Per-call classification through the API: code arguments, whole-file writes, and a lost
``write_file`` of the real filesystem server settled by hash without a human."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest

from ledger.classification.calls import classify_tool_call
from ledger.domain import Idempotency
from ledger.models import ApprovalRequest, IdempotencyRecord, Tool, WorkspaceRoot
from ledger.services.registry import override_tool
from reconcile.services import reconcile_record
from tests.api.conftest import ApiClient, client_for

pytestmark = pytest.mark.django_db
FIXTURES = Path(__file__).parent.parent / "fixtures" / "mcp"


def _catalogue(name: str) -> dict[str, Any]:
    return json.loads((FIXTURES / f"{name}_tools_list.json").read_text())


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


@pytest.fixture
def api(tenant) -> ApiClient:
    return client_for(tenant)


def _import(api: ApiClient, server: str, catalogue: str, trust: str = "untrusted") -> None:
    response = api.post(
        "/tools/import-mcp",
        {"server": server, "trust": trust, "tools_list": _catalogue(catalogue)},
    )
    assert response.status_code == 200, response.content


def _classify(api: ApiClient, tool: str, tool_input: dict[str, Any]) -> dict[str, Any]:
    response = api.post("/tools/classify", {"tool": tool, "input": tool_input})
    assert response.status_code == 200, response.content
    return response.json()


def test_a_trusted_sql_tool_is_classified_from_each_statement(api: ApiClient) -> None:
    _import(api, "pg", "server_postgres", trust="trusted")
    select = _classify(api, "pg/query", {"sql": "SELECT * FROM orders WHERE id = 1"})
    escape = _classify(api, "pg/query", {"sql": "COMMIT; DROP SCHEMA public CASCADE"})
    assert select["replay_policy"] == "auto"
    assert (escape["replay_policy"], escape["destructive"]) == ("never", True)
    assert "stacked" in escape["reason"]


def test_a_sql_tool_whose_name_writes_never_reads_by_its_statement(api: ApiClient) -> None:
    _import(api, "sqlite", "mcp_server_sqlite")
    assert _classify(api, "sqlite/read_query", {"query": "SELECT 1"})["replay_policy"] == "auto"
    assert _classify(api, "sqlite/write_query", {"query": "SELECT 1"})["replay_policy"] == "ask"
    assert _classify(api, "sqlite/create_table", {"query": "SELECT 1"})["replay_policy"] == "never"


def test_a_missing_code_argument_is_a_clear_error_that_records_nothing(api: ApiClient) -> None:
    _import(api, "pg", "server_postgres")
    api.start_run()
    response = api.call("pg/query", {"statement": "SELECT 1"})
    assert response.status_code == 400
    assert "'sql'" in response.json()["detail"]
    assert not IdempotencyRecord.objects.exists()


def test_an_override_is_not_second_guessed_per_call(api: ApiClient, tenant) -> None:
    _import(api, "pg", "server_postgres")
    override_tool(
        tool=Tool.objects.get(tenant=tenant, name="pg/query"),
        idempotency=Idempotency.NON_IDEMPOTENT,
        reason="replays of this database are never automatic",
        actor="alice",
        source="console",
    )
    assert _classify(api, "pg/query", {"sql": "SELECT 1"})["replay_policy"] == "never"


def test_a_whole_file_write_is_conditional_only_under_a_workspace_root(
    api: ApiClient, tenant, tmp_path: Path
) -> None:
    _import(api, "fs", "server_filesystem")
    WorkspaceRoot.objects.create(tenant=tenant, name="ws", path=str(tmp_path))
    inside = _classify(api, "fs/write_file", {"path": f"{tmp_path}/a.txt", "content": "x"})
    outside = _classify(api, "fs/write_file", {"path": "/etc/passwd", "content": "x"})
    climbing = _classify(api, "fs/write_file", {"path": f"{tmp_path}/../x", "content": "x"})
    # A path the worker's check would refuse (``ledger.paths``) is checked by no hash.
    backslash = _classify(api, "fs/write_file", {"path": f"{tmp_path}/a\\b", "content": "x"})
    assert inside["replay_policy"] == "ask" and inside["idempotency"] == "conditional"
    assert (
        outside["replay_policy"] == "never" and "No registered workspace root" in outside["reason"]
    )
    assert climbing["replay_policy"] == backslash["replay_policy"] == "never"
    # An edit is not a whole-file write: a file hash cannot tell whether it landed.
    edit = _classify(api, "fs/edit_file", {"path": f"{tmp_path}/a.txt", "edits": []})
    assert edit["replay_policy"] == "never"


def test_another_tenants_workspace_root_does_not_cover_a_path(
    api: ApiClient, other_tenant, tmp_path: Path
) -> None:
    _import(api, "fs", "server_filesystem")
    WorkspaceRoot.objects.create(tenant=other_tenant, name="ws", path=str(tmp_path))
    mine = _classify(api, "fs/write_file", {"path": f"{tmp_path}/a.txt", "content": "x"})
    assert mine["replay_policy"] == "never"


def test_the_classifier_is_handed_the_roots_and_reads_no_table(
    api: ApiClient, tenant, tmp_path: Path, django_assert_num_queries: Any
) -> None:
    _import(api, "fs", "server_filesystem")
    WorkspaceRoot.objects.create(tenant=tenant, name="ws", path=str(tmp_path))
    tool = Tool.objects.get(tenant=tenant, name="fs/write_file")
    roots = WorkspaceRoot.paths_for(tool)
    tool_input = {"path": f"{tmp_path}/a.txt", "content": "x"}
    with django_assert_num_queries(0):
        covered = classify_tool_call(tool, tool_input, roots=roots)
        uncovered = classify_tool_call(tool, tool_input)
    assert roots == [str(tmp_path)]
    assert covered.idempotency is Idempotency.CONDITIONAL
    assert uncovered.replay_policy.value == "never"
    # A tool whose calls no root decides is handed none, without asking the database.
    reader = Tool.objects.get(tenant=tenant, name="fs/read_text_file")
    with django_assert_num_queries(0):
        assert WorkspaceRoot.paths_for(reader) == []


def test_a_lost_filesystem_write_file_settles_by_hash_without_a_human(
    api: ApiClient, tenant, tmp_path: Path
) -> None:
    _import(api, "fs", "server_filesystem")
    WorkspaceRoot.objects.create(tenant=tenant, name="ws", path=str(tmp_path))
    target = tmp_path / "notes.md"
    target.write_text("old")
    api.start_run()
    tool_input = {"path": str(target), "content": "new"}
    plan = {
        "workspace": "ws",
        "path": "notes.md",
        "before_hash": _sha("old"),
        "after_hash": _sha("new"),
        "diff": "-old\n+new\n",
    }
    first = api.call("fs/write_file", tool_input, write_plan=plan).json()
    assert first["decision"] == "execute"
    assert first["classification"]["replay_policy"] == "ask"
    target.write_text("new")  # the server wrote the file, then the answer was lost
    lost = api.post(
        f"/calls/{first['call_id']}/complete", {"fencing_token": 1, "outcome": "uncertain"}
    )
    assert lost.status_code == 200, lost.content
    record = IdempotencyRecord.objects.get()
    assert record.state == "unknown"

    assert reconcile_record(record.pk, worker="w1") == "succeeded"

    record.refresh_from_db()
    assert record.state == "succeeded" and record.executions == 1
    assert record.result["reconciled"] == "already_applied"
    assert not ApprovalRequest.objects.exists()
    again = api.call("fs/write_file", tool_input).json()
    assert again["decision"] == "recorded_result"
