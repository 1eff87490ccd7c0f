"""A stricter JSON body parser: what cannot be stored faithfully, or would cost more than a
request may, is refused before any view runs and changes nothing."""

from __future__ import annotations

import json
from typing import Any, cast

from django.conf import settings
from django.http import HttpRequest
from ninja.parser import Parser
from pydantic import BaseModel

from ledger.errors import InvalidInput, LedgerError


class InputTooLarge(LedgerError):
    """A JSON value nested too deep or holding too long a string (``LEDGER_MAX_JSON_DEPTH``,
    ``LEDGER_MAX_STRING_CHARS``)."""

    code = "INPUT_TOO_LARGE"
    http_status = 422


def _no_constants(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def _no_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """An object with a key twice is ambiguous (which one counts?): refused, not "last wins"."""
    value = dict(pairs)
    if len(value) != len(pairs):
        seen: set[str] = set()
        twice = next(key for key, _ in pairs if key in seen or seen.add(key))  # type: ignore[func-returns-value]
        raise ValueError(f"the key {twice!r} appears twice in one object")
    return value


def check_value(value: Any) -> None:
    """NUL cannot be stored in PostgreSQL text or jsonb and lone surrogates are not UTF-8
    (400 ``INVALID_JSON``); nesting deeper than ``LEDGER_MAX_JSON_DEPTH`` or a string longer than
    ``LEDGER_MAX_STRING_CHARS`` is refused (422). One pass, linear in the value's size."""
    max_depth = settings.LEDGER_MAX_JSON_DEPTH
    max_chars = settings.LEDGER_MAX_STRING_CHARS
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, str):
            if "\x00" in item:
                raise ValueError("strings must not contain NUL characters")
            if len(item) > max_chars:
                raise InputTooLarge(
                    f"a string of {len(item)} characters is longer than the {max_chars} allowed"
                )
            try:
                item.encode("utf-8")
            except UnicodeEncodeError:
                raise ValueError("strings must be valid Unicode (no lone surrogates)") from None
        elif isinstance(item, dict | list):
            if depth > max_depth:
                raise InputTooLarge(
                    f"the JSON is nested deeper than the {max_depth} levels allowed"
                )
            children = [*item.keys(), *item.values()] if isinstance(item, dict) else item
            stack.extend((child, depth + 1) for child in children)


class StrictJSONParser(Parser):
    """Rejects NaN/Infinity, duplicate keys, NUL characters and lone UTF-16 surrogates, and
    values nested too deep or with too long strings."""

    def parse_body(self, request: HttpRequest) -> dict[str, Any]:
        data = json.loads(
            request.body, parse_constant=_no_constants, object_pairs_hook=_no_duplicate_keys
        )
        check_value(data)
        return cast(dict[str, Any], data)


def reject_unknown_query(request: HttpRequest, schema: type[BaseModel]) -> None:
    """A query parameter the operation does not declare is a mistake (a typo, an old client):
    refuse it rather than answer as if it were not there."""
    unknown = sorted(set(request.GET) - set(schema.model_fields))
    if unknown:
        raise InvalidInput(f"unknown query parameter(s): {', '.join(map(repr, unknown))}")
