"""Idempotency keys and request fingerprints.

The key is built by the runtime from the business intent (DESIGN section 3), never by the model:
``agent:{tenant}:{user}:{run}:{tool}:{object}`` for the ``run`` scope and
``agent:{tenant}:{user}:{tool}:{object}`` for the ``business`` scope. Without a business object
the step id stands in, which makes the action run-scoped whatever the tool's scope.

A tool may declare key fields, argument paths such as ``cart.id`` (in the manner of
Powertools' ``event_key_jmespath``): the business object is derived from their values, so a
call the model re-issues with a new tool-call id maps to the same key. A call of a tool that is
not idempotent and names no business object is one action with every call of the same tool
and arguments in its run (``arguments_object``): a transport's id (a JSON-RPC id, a tool-call
id) never makes a second action. A read (an idempotent call) is keyed by its step, so a new
read reads again.

A key is printable ASCII, 1 to ``MAX_KEY_LENGTH`` characters, whatever its components hold
(``percent_encoded``): a user ``josé`` is ``jos%C3%A9`` in it, so every key can be sent as an
``Idempotency-Key`` header and is taken by the downstream kit.
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any

from ledger.domain import KeyScope

MAX_COMPONENT_LENGTH = 200
MAX_KEY_LENGTH = 1024
#: Longer derived business objects are replaced by their hash (still one per value set).
MAX_READABLE_OBJECT = 120
KEY_FIELD_SYNTAX = r"^[A-Za-z_][A-Za-z0-9_-]*(\.[A-Za-z0-9_-]+)*$"
KEY_FIELD_PATTERN = re.compile(KEY_FIELD_SYNTAX)
MAX_KEY_FIELDS = 10
#: How every key begins (the console searches a text that begins so as the start of a key).
KEY_START = "agent:"


class KeyBuildError(ValueError):
    """A key component is missing or malformed."""


def _component(label: str, value: str | None) -> str:
    if value is None or value == "":
        raise KeyBuildError(f"{label} is required to build an idempotency key")
    if len(value) > MAX_COMPONENT_LENGTH:
        raise KeyBuildError(f"{label} is longer than {MAX_COMPONENT_LENGTH} characters")
    if any(ord(ch) < 32 or ord(ch) == 127 for ch in value):
        raise KeyBuildError(f"{label} contains control characters")
    return percent_encoded(value)


#: What a key component keeps as it is: printable ASCII but the space (an HTTP header's value
#: loses it at either end), the escape character ``%`` and the separator ``:``.
_KEPT = frozenset(map(chr, range(33, 127))) - {"%", ":"}


def percent_encoded(value: str) -> str:
    """``value`` as it goes into a key: every character but those ``_KEPT`` written as the
    ``%XX`` of its UTF-8 bytes, so a key is printable ASCII (it travels in an HTTP header, and
    the downstream kit takes nothing else) and stays unambiguous: distinct values, distinct
    text, and no ``:`` but the separators."""
    return "".join(
        ch if ch in _KEPT else "".join(f"%{byte:02X}" for byte in ch.encode()) for ch in value
    )


def build_idempotency_key(
    *,
    scope: KeyScope,
    tenant: str,
    user: str,
    run_id: str,
    tool: str,
    business_object_id: str | None = None,
    step_id: str | None = None,
) -> str:
    """The idempotency key for one business action."""
    if business_object_id:
        target = _component("business_object_id", business_object_id)
    elif step_id:
        target = "step=" + _component("step_id", step_id)
        scope = KeyScope.RUN  # a step only exists inside its run
    else:
        raise KeyBuildError("a business_object_id or a step_id is required to build a key")
    parts = [_component("tenant", tenant), _component("user", user)]
    if scope is KeyScope.RUN:
        parts.append(_component("run_id", run_id))
    parts += [_component("tool", tool), target]
    key = KEY_START + ":".join(parts)
    if len(key) > MAX_KEY_LENGTH:
        raise KeyBuildError(f"the idempotency key would be longer than {MAX_KEY_LENGTH} characters")
    return key


#: How a business object derived from the arguments begins (``arguments_object``).
ARGUMENTS_OBJECT = "args="


def arguments_object(tool_input: Any) -> str:
    """The business object of a call that names none: the canonical digest of its arguments,
    so the same arguments are the same action however the call is re-sent or re-planned."""
    return ARGUMENTS_OBJECT + fingerprint(tool_input)[:32]


def validate_key_fields(paths: list[str]) -> list[str]:
    """The key fields as declared, or ``KeyBuildError`` saying which one is malformed."""
    if len(paths) > MAX_KEY_FIELDS:
        raise KeyBuildError(f"a tool has at most {MAX_KEY_FIELDS} key fields")
    for path in paths:
        if not isinstance(path, str) or len(path) > MAX_COMPONENT_LENGTH:
            raise KeyBuildError(f"key field {path!r} is not a path of at most 200 characters")
        if not KEY_FIELD_PATTERN.match(path):
            raise KeyBuildError(f"key field {path!r} is not a dotted argument path (cart.id)")
    return list(dict.fromkeys(paths))  # a path named twice is the same key field


def key_field_outside_schema(paths: list[str], input_schema: Any) -> str | None:
    """The first of ``paths`` that names no argument ``input_schema`` (a JSON Schema, an MCP
    tool's ``inputSchema``) describes, or None. A declared path that no call can carry would
    refuse every call of the tool, so it is caught when declared. Only what the schema lists
    is checked: an object that lists its ``properties`` (and allows no others by an explicit
    ``additionalProperties`` or ``patternProperties``), an array's ``items`` by index; a part
    of the schema that says nothing more accepts any path below it."""
    for path in paths:
        schema = input_schema
        for part in path.split("."):
            if not isinstance(schema, dict):
                break
            properties = schema.get("properties")
            if isinstance(properties, dict):
                if part in properties:
                    schema = properties[part]
                    continue
                if schema.get("additionalProperties") or schema.get("patternProperties"):
                    break
                return path
            items = schema.get("items")
            if isinstance(items, dict) and schema.get("type") == "array":
                if not part.isdigit():
                    return path
                schema = items
                continue
            break
    return None


_MISSING = object()


def value_at(value: Any, path: str, default: Any = None) -> Any:
    """The value at a dotted ``path`` (``cart.id``, ``items.0``) in JSON ``value``, or
    ``default`` where there is none."""
    for part in path.split("."):
        if isinstance(value, dict) and part in value:
            value = value[part]
        elif isinstance(value, list) and part.isdigit() and int(part) < len(value):
            value = value[int(part)]
        else:
            return default
    return value


def _at(value: Any, path: str) -> Any:
    found = value_at(value, path, _MISSING)
    if found is _MISSING:
        raise KeyBuildError(f"key field {path!r} is missing from the input")
    if found is None or (isinstance(found, str | list | dict) and not found):
        raise KeyBuildError(f"key field {path!r} is empty in the input")
    return found


def business_object_from(key_fields: list[str], tool_input: dict[str, Any]) -> str | None:
    """The business object named by the key fields' values in ``tool_input`` (None when the
    tool declares none): readable when short (``cart.id=c-9``), else a hash of the values."""
    if not key_fields:
        return None
    values = {path: _at(tool_input, path) for path in key_fields}
    readable = ",".join(
        f"{path}={value if isinstance(value, str) else canonical_json(value)}"
        for path, value in values.items()
    )
    if readable.isprintable() and len(percent_encoded(readable)) <= MAX_READABLE_OBJECT:
        return readable
    return "sha256=" + fingerprint(values)[:40]


def _normalise(value: Any) -> Any:
    if isinstance(value, bool) or value is None or isinstance(value, str | int):
        return value
    if isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")):
            raise ValueError("NaN and infinity cannot be fingerprinted")
        return int(value) if value.is_integer() else value
    if isinstance(value, dict):
        if not all(isinstance(k, str) for k in value):
            raise ValueError("object keys must be strings")
        return {k: _normalise(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_normalise(v) for v in value]
    raise ValueError(f"{type(value).__name__} is not a JSON value")


def canonical_json(value: Any) -> str:
    """JSON with sorted keys, no spaces, and 1.0 written as 1, so equal inputs match."""
    return json.dumps(
        _normalise(value),
        sort_keys=True,
        separators=(",", ":"),
        ensure_ascii=False,
        allow_nan=False,
    )


def fingerprint(value: Any) -> str:
    """sha256 of the canonical JSON of a request's parameters."""
    return hashlib.sha256(canonical_json(value).encode()).hexdigest()
