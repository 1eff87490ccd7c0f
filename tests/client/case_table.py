"""The table of call cases both clients run (tests/client/cases/calls.json): how a case's tool
behaves on each execution, and what a case expects of the observations."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from agent_ledger_client import CallContext, ToolError

TABLE = Path(__file__).with_name("cases") / "calls.json"
#: Where an observation's expected field is read: at its top, or in its metadata.
TOP_LEVEL = frozenset({"ok", "code", "content"})


def cases() -> list[dict[str, Any]]:
    cases: list[dict[str, Any]] = json.loads(TABLE.read_text())["cases"]
    return cases


class Tool:
    """A case's tool: what it does on each execution, and how many times it ran."""

    def __init__(self, attempts: list[Any]) -> None:
        self.attempts = attempts
        self.executions = 0

    def __call__(self, ctx: CallContext) -> Any:
        self.executions += 1
        attempt = self.attempts[min(self.executions, len(self.attempts)) - 1]
        if attempt == "slow":
            time.sleep(1.0)  # past the call's timeout
            return {"late": True}
        if attempt == "lost":
            raise ConnectionResetError("the connection was lost after the request was sent")
        if "tool_error" in attempt:
            error = attempt["tool_error"]
            raise ToolError(error["code"], error["message"], retryable=error["retryable"])
        return attempt["returns"]


def mismatches(
    case: dict[str, Any], observations: list[dict[str, Any]], executions: int
) -> list[str]:
    """What differs from the case's expectations (empty when it holds)."""
    expect = case["expect"]
    wanted = expect.get("calls") or [expect["every_call"]] * len(case["calls"])
    found = []
    for number, (observation, fields) in enumerate(zip(observations, wanted, strict=True), 1):
        for name, value in fields.items():
            actual = (
                observation.get(name) if name in TOP_LEVEL else observation["metadata"].get(name)
            )
            if actual != value:
                found.append(f"call {number}: {name} is {actual!r}, not {value!r}")
    if executions != expect["executions"]:
        found.append(f"executions: {executions}, not {expect['executions']}")
    return found
