"""Which argument of a tool decides its class per call, read from the tool's input schema.

An argument that carries code (SQL, a shell command, a script) decides the call's class,
whatever the server claims about the tool: ``query("COMMIT; DROP SCHEMA public CASCADE")``
through a "read-only" SQL tool is a drop. A whole-file write (a path and the new content) is
decided per call too, by whether a registered workspace root covers the path.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from ledger.classification.words import read_name, stems


class PerCall(StrEnum):
    """What a tool's deciding argument holds."""

    SQL = "sql"
    SHELL = "shell"
    CODE = "code"
    FILE_WRITE = "file_write"


@dataclass(frozen=True, slots=True)
class DecidingArgument:
    kind: PerCall
    name: str


_SQL_NAMES = frozenset({"sql", "sql_query", "sqlquery", "statement", "statements"})
_QUERY_NAMES = frozenset({"query", "q"})
_SQL_MENTION = re.compile(r"\bSQL\b|SQLite|PostgreSQL|Postgres|MySQL|\bSELECT\b|\bINSERT\b")
_SHELL_NAMES = frozenset({"command", "cmd", "shell_command", "bash_command", "commandline"})
_CODE_NAMES = frozenset({"code", "script", "source", "javascript", "python", "js", "program"})
_CODE_MENTION = re.compile(r"\b(execut\w*|run|runs|evaluat\w*|eval|interpret\w*)\b", re.IGNORECASE)
_PATH_NAMES = ("path", "file_path", "filepath", "filename", "file")
_CONTENT_NAMES = frozenset({"content", "contents", "text", "data", "body"})


def _properties(descriptor: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    schema = descriptor.get("inputSchema")
    properties = schema.get("properties") if isinstance(schema, Mapping) else None
    if not isinstance(properties, Mapping):
        return {}
    return {
        str(name): spec if isinstance(spec, Mapping) else {} for name, spec in properties.items()
    }


def _text(spec: Mapping[str, Any]) -> str:
    parts = [spec.get("description"), spec.get("title")]
    return " ".join(p for p in parts if isinstance(p, str))


def _is_string(spec: Mapping[str, Any]) -> bool:
    return spec.get("type") in (None, "string")


def deciding_argument(descriptor: Mapping[str, Any]) -> DecidingArgument | None:
    """The argument that decides this tool's class per call, or None."""
    properties = _properties(descriptor)
    description = descriptor.get("description")
    tool_text = (
        f"{descriptor.get('name', '')} {description if isinstance(description, str) else ''}"
    )
    for name, spec in properties.items():
        lowered = name.lower()
        about = f"{tool_text} {_text(spec)}"
        if not _is_string(spec):
            continue
        if lowered in _SQL_NAMES or (lowered in _QUERY_NAMES and _SQL_MENTION.search(about)):
            return DecidingArgument(PerCall.SQL, name)
        if lowered in _SHELL_NAMES:
            return DecidingArgument(PerCall.SHELL, name)
        if lowered in _CODE_NAMES and _CODE_MENTION.search(about):
            return DecidingArgument(PerCall.CODE, name)
    return _whole_file_write(descriptor, properties)


def _whole_file_write(
    descriptor: Mapping[str, Any], properties: Mapping[str, Mapping[str, Any]]
) -> DecidingArgument | None:
    """``write_file(path, content)``: a name that writes a file, one path and the content.

    Edits (old and new text), moves and multi-file writes are not whole-file writes: their
    effect is not the content of one file, so a file hash cannot settle them."""
    reading = read_name(str(descriptor.get("name", "")))
    words = {form for word in reading.writes.values() for form in stems(word)}
    if not words & {"write", "overwrite", "save", "put", "store"}:
        return None
    paths = [n for n in _PATH_NAMES if n in properties and _is_string(properties[n])]
    contents = [n for n in properties if n.lower() in _CONTENT_NAMES]
    if len(paths) != 1 or len(contents) != 1:
        return None
    return DecidingArgument(PerCall.FILE_WRITE, paths[0])
