"""Idempotency keys and request fingerprints.

The key is built by the runtime from the business intent (DESIGN section 3), never by the model:
``agent:{tenant}:{user}:{run}:{tool}:{object}`` for the ``run`` scope and
``agent:{tenant}:{user}:{tool}:{object}`` for the ``business`` scope. Without a business object
the step id stands in, which makes the action run-scoped whatever the tool's scope.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from ledger.domain import KeyScope

MAX_COMPONENT_LENGTH = 200
MAX_KEY_LENGTH = 1024


class KeyBuildError(ValueError):
    """A key component is missing or malformed."""


def _component(label: str, value: str | None) -> str:
    if value is None or value == "":
        raise KeyBuildError(f"{label} is required to build an idempotency key")
    if len(value) > MAX_COMPONENT_LENGTH:
        raise KeyBuildError(f"{label} is longer than {MAX_COMPONENT_LENGTH} characters")
    if any(ord(ch) < 32 or ord(ch) == 127 for ch in value):
        raise KeyBuildError(f"{label} contains control characters")
    # ':' separates components; escape it (and the escape character) so keys stay unambiguous.
    return value.replace("%", "%25").replace(":", "%3A")


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
    parts = ["agent", _component("tenant", tenant), _component("user", user)]
    if scope is KeyScope.RUN:
        parts.append(_component("run_id", run_id))
    parts += [_component("tool", tool), target]
    key = ":".join(parts)
    if len(key) > MAX_KEY_LENGTH:
        raise KeyBuildError(f"the idempotency key would be longer than {MAX_KEY_LENGTH} characters")
    return key


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
