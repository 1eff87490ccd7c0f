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
from typing import Any

from ledger.classification.words import description_writes, read_name, stems, tokens
from ledger.domain import PerCall


@dataclass(frozen=True, slots=True)
class DecidingArgument:
    kind: PerCall
    name: str


# Argument-name words that say the argument holds SQL (``sql_text``, ``sqlStatement``, ``stmt``).
_SQL_WORDS = frozenset({"sql", "stmt", "stmts"})
# ``statement`` holds SQL when it is the whole name or the tool mentions SQL; ``statement_date``
# of a bank's ``get_statement`` does not.
_STATEMENT_WORDS = frozenset({"statement", "statements"})
_QUERY_NAMES = frozenset({"query", "q"})
# Upper-case keywords only: "Select a result" is English, "SELECT" is SQL.
_SQL_MENTION = re.compile(
    r"(?i:\bsql\b|sqlite|postgres|mysql|mariadb|\bt-sql\b)|\bSELECT\b|\bINSERT\b"
)
_SHELL_NAMES = frozenset({"command", "cmd", "shell_command", "bash_command", "commandline"})
_CODE_NAMES = frozenset({"code", "script", "source", "javascript", "python", "js", "program"})
_CODE_MENTION = re.compile(r"\b(execut\w*|run|runs|evaluat\w*|eval|interpret\w*)\b", re.IGNORECASE)
# Tool-name words that say the tool runs what it is given (a query language, a command).
_RUNS_INPUT = frozenset({"query", "execute", "exec", "run", "eval", "evaluate"})
_PATH_NAMES = ("path", "file_path", "filepath", "filename", "file")
_CONTENT_NAMES = frozenset({"content", "contents", "text", "data", "body"})
# Words that say a tool writes one file; in a description, creating the file is that write.
_FILE_WRITES = frozenset({"write", "overwrite", "save", "put", "store"})
_FILE_WRITES_DESCRIBED = _FILE_WRITES | {"create"}


def _properties(schema: object) -> dict[str, Mapping[str, Any]]:
    properties = schema.get("properties") if isinstance(schema, Mapping) else None
    if not isinstance(properties, Mapping):
        return {}
    return {
        str(name): spec if isinstance(spec, Mapping) else {} for name, spec in properties.items()
    }


def _text(spec: Mapping[str, Any]) -> str:
    parts = [spec.get("description"), spec.get("title")]
    return " ".join(p for p in parts if isinstance(p, str))


def _types(spec: Mapping[str, Any]) -> set[object]:
    declared = spec.get("type")
    if isinstance(declared, list):
        return set(declared)
    return {declared}


def _is_string(spec: Mapping[str, Any]) -> bool:
    """A string, or a type list that allows one (``["string", "null"]``)."""
    types = _types(spec)
    return None in types or "string" in types


def _is_strings(spec: Mapping[str, Any]) -> bool:
    """An array of strings."""
    items = spec.get("items")
    return "array" in _types(spec) and isinstance(items, Mapping) and _is_string(items)


def _is_free_text(spec: Mapping[str, Any]) -> bool:
    return _is_string(spec) and not ({"enum", "const", "format"} & spec.keys())


def _sql_name(name: str, about: str) -> bool:
    words = set(tokens(name))
    if words & _SQL_WORDS:
        return True
    if words & _STATEMENT_WORDS:
        return words <= _STATEMENT_WORDS or bool(_SQL_MENTION.search(about))
    return name.lower() in _QUERY_NAMES and bool(_SQL_MENTION.search(about))


def _argument_kind(name: str, spec: Mapping[str, Any], about: str) -> PerCall | None:
    lowered = name.lower()
    if (_is_string(spec) or _is_strings(spec)) and _sql_name(name, about):
        return PerCall.SQL
    if not _is_string(spec):
        return None
    if lowered in _SHELL_NAMES:
        return PerCall.SHELL
    if lowered in _CODE_NAMES and _CODE_MENTION.search(about):
        return PerCall.CODE
    return None


def _carries_nested_code(spec: Mapping[str, Any], about: str, depth: int = 0) -> bool:
    """An object argument with SQL, a command or code in a field (``request.sql``)."""
    if depth > 4:
        return False
    for name, inner in _properties(spec).items():
        if _argument_kind(name, inner, about) or _carries_nested_code(inner, about, depth + 1):
            return True
    return False


def deciding_argument(descriptor: Mapping[str, Any]) -> DecidingArgument | None:
    """The argument that decides this tool's class per call, or None.

    Code the per-call classifiers cannot read (a script, SQL nested inside an object argument,
    the free text a query- or execute-named tool runs) is ``code``: always ``never``."""
    properties = _properties(descriptor.get("inputSchema"))
    description = descriptor.get("description")
    tool_name = str(descriptor.get("name", ""))
    tool_text = f"{tool_name} {description if isinstance(description, str) else ''}"
    for name, spec in properties.items():
        kind = _argument_kind(name, spec, f"{tool_text} {_text(spec)}")
        if kind is not None:
            return DecidingArgument(kind, name)
    for name, spec in properties.items():
        if _carries_nested_code(spec, f"{tool_text} {_text(spec)}"):
            return DecidingArgument(PerCall.CODE, name)
    found = _whole_file_write(descriptor, properties)
    if found is not None:
        return found
    # The verb leads the name, after at most a prefix (``query``, ``run_query``, ``bq_query``).
    if {form for word in tokens(tool_name)[:2] for form in stems(word)} & _RUNS_INPUT:
        for name, spec in properties.items():
            if _is_free_text(spec):
                return DecidingArgument(PerCall.CODE, name)
    return None


def _whole_file_write(
    descriptor: Mapping[str, Any], properties: Mapping[str, Mapping[str, Any]]
) -> DecidingArgument | None:
    """``write_file(path, content)``: a name whose only write is a file write, a description
    that names no other effect, one path and the content.

    Edits (old and new text), moves and multi-file writes are not whole-file writes: their
    effect is not the content of one file, so a file hash cannot settle them."""
    reading = read_name(str(descriptor.get("name", "")))
    if not reading.acting or not all(stems(word) & _FILE_WRITES for word in reading.acting):
        return None
    description = descriptor.get("description")
    named = description_writes(description if isinstance(description, str) else "")
    if not all(
        stems(write.verb) & _FILE_WRITES_DESCRIBED or write.verb.startswith("overwrit")
        for write in named
    ):
        return None
    paths = [n for n in _PATH_NAMES if n in properties and _is_string(properties[n])]
    contents = [n for n in properties if n.lower() in _CONTENT_NAMES]
    if len(paths) != 1 or len(contents) != 1:
        return None
    return DecidingArgument(PerCall.FILE_WRITE, paths[0])
