"""The pure rules of a compensation (docs/compensation.md): its key, the exact call it makes,
built from the original call's input and result, and the state it shows. No ORM here."""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import quote

from ledger.domain import RecordState
from ledger.keys import MAX_KEY_LENGTH, value_at
from ledger.redaction import is_altered, is_restricted

#: A compensation's key is the original action's key with this suffix, so it is derived by the
#: same runtime rule, unique per original action, and recognisable downstream.
KEY_SUFFIX = ":compensate"
MAX_ARGUMENTS = 20
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,99}$")
_PATH = re.compile(r"^(input|result)(\.[A-Za-z0-9_-]{1,100}){1,10}$")
_PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")


class CompensationError(ValueError):
    """A declaration or an original call from which no compensation can be built."""


def compensation_key(original_key: str) -> str:
    """The compensation's idempotency key."""
    key = original_key + KEY_SUFFIX
    if len(key) > MAX_KEY_LENGTH:
        raise CompensationError(
            f"the compensation key would be longer than {MAX_KEY_LENGTH} characters"
        )
    return key


def validate_arguments(arguments: Any) -> dict[str, str]:
    """A declaration's argument mapping: ``{name: "input.<path>" | "result.<path>"}``."""
    if not isinstance(arguments, dict) or not arguments:
        raise CompensationError("arguments must be an object of at least one argument")
    if len(arguments) > MAX_ARGUMENTS:
        raise CompensationError(f"a compensation has at most {MAX_ARGUMENTS} arguments")
    for name, path in arguments.items():
        if not _NAME.match(name):
            raise CompensationError(f"argument name {name!r} is not an identifier")
        if not isinstance(path, str) or not _PATH.match(path):
            raise CompensationError(
                f"argument {name!r} must be a path starting with input. or result. "
                f"(such as result.id), not {path!r}"
            )
    return dict(arguments)


def _result_object(result: Any) -> Any:
    """The downstream object a result stands for: a call settled by a look-up records the
    object it found as ``evidence`` (``reconcile.services``), a reported one records it as is."""
    if isinstance(result, dict) and "reconciled" in result and "evidence" in result:
        return result["evidence"]
    return result


def compensation_arguments(
    arguments: dict[str, str], *, tool_input: Any, result: Any
) -> dict[str, Any]:
    """The compensating call's arguments, taken from the original input and result as the
    ledger stored them. A path that is missing or empty is an error, and so is one whose
    stored value was redacted (or the whole input or result, for restricted data): a
    compensation never runs with a guessed argument, nor sends a redaction marker downstream.
    """
    sources = {"input": tool_input, "result": _result_object(result)}
    built: dict[str, Any] = {}
    for name, path in arguments.items():
        source, _, rest = path.partition(".")
        if is_restricted(sources[source]):
            raise CompensationError(
                f"the original call's {source} is restricted data: the ledger keeps only its "
                f"hash, so {path} (for {name}) cannot be taken from it; {_WHAT_TO_DO}"
            )
        value = value_at(sources[source], rest)
        if value is None or (isinstance(value, str | list | dict) and not value):
            raise CompensationError(f"{path} is missing from the original call (for {name})")
        built[name] = value
    refuse_redacted(built, paths=arguments)
    return built


_WHAT_TO_DO = (
    "declare the compensation from a value the ledger keeps as it is (such as the "
    "downstream object's id), or undo the action by hand"
)


def refuse_redacted(arguments: dict[str, Any], *, paths: dict[str, str] | None = None) -> None:
    """Raise when an argument holds a value the ledger redacted or truncated when it stored
    the original call (``ledger.redaction.is_altered``): sent downstream it would be the
    marker, not the value. ``paths`` (the declaration) names where each argument came from."""
    for name, value in arguments.items():
        if is_altered(value):
            where = f"{paths[name]} (for {name})" if paths and name in paths else name
            raise CompensationError(
                f"{where} was redacted when the ledger stored the original call, so the "
                f"compensation cannot be built from it; {_WHAT_TO_DO}"
            )


#: What a compensation shows once its own record succeeded: the original action is undone.
COMPENSATED = "compensated"


def compensation_state(record_state: str | None) -> str:
    """What a compensation shows of its own record's state (None: the record is gone):
    ``compensated`` once it succeeded, else the record's state, or ``missing``."""
    if record_state is None:
        return "missing"
    return COMPENSATED if record_state == RecordState.SUCCEEDED else str(record_state)


#: What the console shows of a compensation waiting to start (its record reserved, or failed
#: without effect and asked for again), by the state of its latest approval request.
_WAITING = {
    "pending": "awaiting_approval",
    "approved": "approved_to_run",
    "consumed": "approved_to_run",  # the worker took it: its record starts next
    "rejected": "rejected",
    "expired": "expired",
    "invalidated": "invalidated",
}


def shown_state(record_state: str | None, approval_state: str | None) -> str:
    """What the console shows of a compensation, read from its own record's state and its
    latest approval request's (None: none): ``compensated`` only once it succeeded, and before
    a human approved it what it waits for, never the record's ``reserved``."""
    if record_state is None:
        return "missing"
    if record_state == RecordState.SUCCEEDED:
        return COMPENSATED
    asked_again = approval_state in ("pending", "approved")  # after it failed without effect
    if record_state == RecordState.RESERVED or (
        record_state == RecordState.FAILED_FINAL and asked_again
    ):
        return _WAITING.get(approval_state or "", "awaiting_approval")
    return str(record_state)


def url_arguments(url_template: str) -> set[str]:
    """The argument names the adapter's URL takes (its ``{name}`` placeholders)."""
    return set(_PLACEHOLDER.findall(url_template))


def example_url(url_template: str) -> str:
    """The adapter's URL with every ``{name}`` filled in, to check where it would go."""
    return _PLACEHOLDER.sub("x", url_template)


def fill_url(url_template: str, arguments: dict[str, Any]) -> str:
    """The adapter's URL with each ``{name}`` replaced by that argument, URL-quoted (so an
    argument cannot add or remove a path segment, or add a query)."""

    def value(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in arguments:
            raise CompensationError(f"the adapter URL needs the argument {name!r}")
        raw = arguments[name]
        quoted = quote(raw if isinstance(raw, str) else str(raw), safe="")
        if quoted in (".", ".."):  # a URL resolves these away: the request would go elsewhere
            raise CompensationError(f"the argument {name!r} cannot be a URL path segment")
        return quoted

    return _PLACEHOLDER.sub(value, url_template)
