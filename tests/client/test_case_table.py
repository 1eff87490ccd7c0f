"""The table of call cases (tests/client/cases/calls.json) through the Python client, with each
of its drivers; clients/typescript/test/cases.test.ts runs the same table through the
TypeScript client (tests/client/test_typescript_client.py)."""

from __future__ import annotations

from contextlib import ExitStack, closing
from typing import Any

import pytest

from tests.client.case_table import Tool, cases, mismatches
from tests.client.conftest import CLIENT_SETTINGS

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.mark.parametrize("case", cases(), ids=lambda case: case["name"])
def test_a_case_of_the_table(
    client: Any, case: dict[str, Any], live_server: Any, ledger_token: str
) -> None:
    tool = Tool(case["attempts"])
    with client.run(user_id="u-cases") as run, ExitStack() as restarts:
        observations = []
        for entry in case["calls"]:
            options = {name: value for name, value in entry.items() if name != "restarted"}
            caller = run
            if entry.get("restarted"):
                # A new client of the same kind continues the run, as a restarted process would.
                again = type(client)(live_server.url, ledger_token, **CLIENT_SETTINGS)
                restarts.enter_context(closing(again))
                caller = again.start_run(user_id="u-cases", run_id=run.run_id)
            observations.append(
                caller.call(case["tool"], dict(case["input"]), execute=tool, **options)
            )
    assert mismatches(case, observations, tool.executions) == []
