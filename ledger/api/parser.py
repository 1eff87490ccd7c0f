"""A stricter JSON body parser: what cannot be stored faithfully is refused as bad JSON."""

from __future__ import annotations

import json
from typing import Any, cast

from django.http import HttpRequest
from ninja.parser import Parser
from pydantic import BaseModel

from ledger.errors import InvalidInput


def _no_constants(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def _check_strings(value: Any) -> None:
    """NUL cannot be stored in PostgreSQL text or jsonb; lone surrogates are not UTF-8."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            if "\x00" in item:
                raise ValueError("strings must not contain NUL characters")
            item.encode("utf-8")
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)


class StrictJSONParser(Parser):
    """Rejects NaN/Infinity, NUL characters and lone UTF-16 surrogates."""

    def parse_body(self, request: HttpRequest) -> dict[str, Any]:
        data = json.loads(request.body, parse_constant=_no_constants)
        _check_strings(data)
        return cast(dict[str, Any], data)


def reject_unknown_query(request: HttpRequest, schema: type[BaseModel]) -> None:
    """A query parameter the operation does not declare is a mistake (a typo, an old client):
    refuse it rather than answer as if it were not there."""
    unknown = sorted(set(request.GET) - set(schema.model_fields))
    if unknown:
        raise InvalidInput(f"unknown query parameter(s): {', '.join(map(repr, unknown))}")
