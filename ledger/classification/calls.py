"""The classification of one tool call: the tool's own, or decided by the call's argument.

Shell tools are classified from their command, code-carrying MCP tools from the argument that
carries the code, and whole-file writes by whether a workspace root covers the path. What people
decided (an override, an org policy rule) is not second-guessed per call, except that it cannot
clear a statement or command the SQL or shell classifier refuses.
"""

from __future__ import annotations

import functools
from collections.abc import Collection
from typing import TYPE_CHECKING, Any

from ledger.classification import Classification, most_conservative
from ledger.classification.files import classify_file_write
from ledger.classification.shell import classify_command
from ledger.classification.sql import classify_sql
from ledger.classification.words import NAME_SAYS, name_write, read_name
from ledger.domain import Idempotency, PerCall, ReplayPolicy
from ledger.errors import InvalidInput

if TYPE_CHECKING:
    from ledger.models import Tool

# Words that say a code-carrying tool runs its code: the code decides, not these words.
_RUNS_CODE = frozenset({"run", "execute", "exec", "query", "eval", "evaluate", "invoke"})


def stored_classification(tool: Tool) -> Classification:
    return Classification(
        Idempotency(tool.idempotency),
        ReplayPolicy(tool.replay_policy),
        tool.destructive,
        tool.reason,
        tool.rule,
    )


def _string_argument(tool: Tool, tool_input: dict[str, Any], name: str) -> str:
    value = tool_input.get(name)
    if not isinstance(value, str):
        raise InvalidInput(f"{tool.name} needs a string {name!r} in its input")
    return value


def _classify_statements(tool: Tool, tool_input: dict[str, Any], name: str) -> Classification:
    """One SQL string, or an array of them: the most conservative of its statements."""
    value = tool_input.get(name)
    if not isinstance(value, list):
        return classify_sql(_string_argument(tool, tool_input, name))
    if not all(isinstance(item, str) for item in value):
        raise InvalidInput(f"{tool.name} needs {name!r} to be a string or an array of strings")
    if not value:
        return classify_sql("")
    results = [classify_sql(item) for item in value]
    return functools.reduce(most_conservative, results)


def _code_call(tool: Tool, classification: Classification) -> Classification:
    """A call's class from its code, never lower than what the rest of the tool's name says
    (``write_query("SELECT 1")`` still writes by its name)."""
    bare_name = tool.name.rsplit("/", 1)[-1]
    floor = name_write(read_name(bare_name), ignore=_RUNS_CODE)
    if floor is None:
        return classification
    return most_conservative(
        classification,
        Classification.of(
            floor.idempotency,
            reason=NAME_SAYS(what=floor.what, word=floor.word),
            rule=floor.rule,
            destructive=floor.destructive,
        ),
    )


def _decided(tool: Tool, tool_input: dict[str, Any], stored: Classification) -> Classification:
    """What people decided stands, except over a statement or command the SQL or shell
    classifier refuses: a rule that ``*query*`` tools are idempotent must not clear a drop."""
    if tool.kind == "shell":
        kind, argument = PerCall.SHELL, "command"
    elif tool.per_call_kind in (PerCall.SQL, PerCall.SHELL):
        kind, argument = PerCall(tool.per_call_kind), tool.per_call_argument
    else:
        return stored
    value = tool_input.get(argument)
    if kind is PerCall.SQL and isinstance(value, (str, list)):
        refused = _classify_statements(tool, tool_input, argument)
    elif kind is PerCall.SHELL and isinstance(value, str):
        refused = classify_command(value)
    else:
        return stored
    if refused.replay_policy is not ReplayPolicy.NEVER:
        return stored
    return most_conservative(stored, refused)


def classify_tool_call(
    tool: Tool, tool_input: dict[str, Any], *, roots: Collection[str] = ()
) -> Classification:
    """The classification of one call of ``tool`` with ``tool_input`` (raises InvalidInput
    when the argument that decides it is missing or not a string). ``roots``: the paths of the
    tenant's workspace roots, which a whole-file write's path is checked against
    (``WorkspaceRoot.paths_for``); none given, none covers it."""
    stored = stored_classification(tool)
    if stored.by_people:
        return _decided(tool, tool_input, stored)
    if tool.kind == "shell":
        return classify_command(_string_argument(tool, tool_input, "command"))
    if not tool.per_call_kind:
        return stored
    kind, argument = PerCall(tool.per_call_kind), tool.per_call_argument
    if kind is PerCall.SQL:
        return _code_call(tool, _classify_statements(tool, tool_input, argument))
    if kind is PerCall.SHELL:
        return _code_call(tool, classify_command(_string_argument(tool, tool_input, argument)))
    if kind is PerCall.FILE_WRITE:
        path = tool_input.get(argument)
        return classify_file_write(path, roots, stored=stored, argument=argument)
    return stored  # other code (a script): nothing reads it, so the stored ``never`` stands
