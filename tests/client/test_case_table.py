"""The table of call cases (tests/client/cases/calls.json) through the Python client, with each
of its drivers; clients/typescript/test/cases.test.ts runs the same table through the
TypeScript client (tests/client/test_typescript_client.py)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.client.case_table import Tool, cases, mismatches

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.mark.parametrize("case", cases(), ids=lambda case: case["name"])
def test_a_case_of_the_table(client: Any, case: dict[str, Any]) -> None:
    tool = Tool(case["attempts"])
    with client.run(user_id="u-cases") as run:
        observations = [
            run.call(case["tool"], dict(case["input"]), execute=tool, **options)
            for options in case["calls"]
        ]
    assert mismatches(case, observations, tool.executions) == []
