"""Approval policies: when a human must approve an action before it first runs (DESIGN section 5).

A manager says "ask before any ``charge_customer`` with ``amount`` over 100" or "ask before every
write under ``prod/``"; a call that matches is reserved, not executed, and waits for an approver
who sees the exact call (and the dry-run diff of a write). Plain Python with no ORM: the call
path evaluates the tenant's policies, read with its run in one query.

A policy matches a call when every part it names matches:

- ``tool``: a glob on the tool's name (``charge_*``; empty: every tool);
- ``path`` with ``operator`` and ``value``: the argument at that dotted path compared with the
  value (``amount`` ``gt`` 100, ``target`` ``prefix`` ``prod/``). A call without the argument does
  not match; an argument the operator cannot compare (a text where a number is expected) does:
  what cannot be judged is asked, never waved through;
- ``write_prefix``: the path of the call's write plan starts with it;
- ``combination``: the call's run is under that version combination (none: every one).

Only calls that change something are asked: a call classified ``idempotent`` (a read) never is.
"""

from __future__ import annotations

import fnmatch
import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from ledger.domain import Idempotency
from ledger.keys import KEY_FIELD_PATTERN, value_at

#: What a policy's glob may hold: a tool name's characters and the glob's own.
TOOL_GLOB = re.compile(r"^[A-Za-z0-9_.:/*?\[\]-]{0,200}$")
MAX_TEXT = 200
_MISSING = object()


class Operator(StrEnum):
    GT = "gt"
    GTE = "gte"
    LT = "lt"
    LTE = "lte"
    EQ = "eq"
    NE = "ne"
    PREFIX = "prefix"
    CONTAINS = "contains"


_NUMERIC = {Operator.GT, Operator.GTE, Operator.LT, Operator.LTE}
_TEXT = {Operator.PREFIX, Operator.CONTAINS}


@dataclass(frozen=True, slots=True)
class PolicySpec:
    """One policy as the call path reads it."""

    id: int
    name: str
    reason: str
    tool: str = ""
    path: str = ""
    operator: str = ""
    value: Any = None
    write_prefix: str = ""
    combination_id: int | None = None

    @classmethod
    def of(cls, row: Mapping[str, Any]) -> PolicySpec:
        return cls(**{name: row[name] for name in cls.__slots__ if name in row})

    def describe(self) -> str:
        """What the policy asks for, in one line, for the approver and the model."""
        parts = [f"tool {self.tool}" if self.tool else "any tool"]
        if self.path:
            parts.append(f"{self.path} {self.operator} {self.value!r}")
        if self.write_prefix:
            parts.append(f"a write under {self.write_prefix}")
        return " and ".join(parts)


def spec_problem(
    *, tool: str, path: str, operator: str, value: Any, write_prefix: str
) -> str | None:
    """Why these parts make no policy, or None."""
    if not TOOL_GLOB.match(tool):
        return "tool is a tool name or a glob of one (letters, digits, _ . : / - * ? [ ])"
    if bool(path) != bool(operator):
        return "a condition needs both an argument path and an operator"
    if path:
        if len(path) > MAX_TEXT or not KEY_FIELD_PATTERN.match(path):
            return f"the argument path {path!r} is not a dotted path (cart.total)"
        if operator not in Operator.__members__.values():
            return f"the operator is one of {', '.join(Operator)}"
        if Operator(operator) in _NUMERIC and not _is_number(value):
            return f"{operator} compares with a number"
        if Operator(operator) in _TEXT and not isinstance(value, str):
            return f"{operator} compares with a text"
        if isinstance(value, str) and len(value) > MAX_TEXT:
            return f"the value is at most {MAX_TEXT} characters"
    elif value is not None:
        return "a value needs an argument path and an operator"
    if len(write_prefix) > MAX_TEXT or any(ord(ch) < 32 for ch in write_prefix):
        return "the write prefix is a path of at most 200 characters"
    if not (tool or path or write_prefix):
        return "say which calls it asks for: a tool, a condition on an argument or a write prefix"
    return None


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _compares(operator: Operator, found: Any, value: Any) -> bool:
    """Whether ``found`` (an argument's value) meets the condition; True when it cannot be
    compared at all (asked rather than waved through)."""
    if operator in _NUMERIC:
        if not _is_number(found):
            return True
        return {
            Operator.GT: found > value,
            Operator.GTE: found >= value,
            Operator.LT: found < value,
            Operator.LTE: found <= value,
        }[operator]
    if operator in _TEXT:
        if not isinstance(found, str):
            return True
        return found.startswith(value) if operator is Operator.PREFIX else value in found
    equal = found == value and isinstance(found, bool) == isinstance(value, bool)
    return equal if operator is Operator.EQ else not equal


def matches(
    spec: PolicySpec,
    *,
    tool: str,
    tool_input: Any,
    write_path: str | None,
    combination_id: int | None,
) -> bool:
    """Whether ``spec`` asks for this call (see the module's rules)."""
    if spec.combination_id is not None and spec.combination_id != combination_id:
        return False
    if spec.tool and not fnmatch.fnmatchcase(tool, spec.tool):
        return False
    if spec.write_prefix and not (write_path or "").startswith(spec.write_prefix):
        return False
    if spec.path:
        found = value_at(tool_input, spec.path, _MISSING)
        if found is _MISSING or not _compares(Operator(spec.operator), found, spec.value):
            return False
    return True


def asking_policy(
    specs: Iterable[PolicySpec],
    *,
    idempotency: Idempotency,
    tool: str,
    tool_input: Any,
    write_path: str | None,
    combination_id: int | None,
) -> PolicySpec | None:
    """The first policy (by id) that asks a human before this call first runs, or None."""
    if idempotency is Idempotency.IDEMPOTENT:
        return None
    for spec in sorted(specs, key=lambda spec: spec.id):
        if matches(
            spec,
            tool=tool,
            tool_input=tool_input,
            write_path=write_path,
            combination_id=combination_id,
        ):
            return spec
    return None
