"""Downstream look-ups by idempotency key: a configurable HTTP adapter and a Python interface."""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Protocol

import httpx
from django.conf import settings
from django.utils.translation import gettext_noop

from ledger import outbound, tracing
from ledger.stored_text import StoredText
from reconcile.models import DownstreamAdapter

URL_REFUSED = StoredText(gettext_noop("look-up URL refused: %(error)s"))


class LookupOutcome(StrEnum):
    FOUND = "found"
    NOT_FOUND = "not_found"
    UNREACHABLE = "unreachable"
    TIMEOUT = "timeout"
    MALFORMED = "malformed"
    REFUSED = "refused"


@dataclass(frozen=True, slots=True)
class LookupResult:
    outcome: LookupOutcome
    detail: str
    evidence: Any = None


class DownstreamLookup(Protocol):
    """Implement this for a downstream the HTTP adapter cannot describe."""

    def lookup(self, *, idempotency_key: str, tool: str) -> LookupResult: ...


class HttpLookup:
    def __init__(self, adapter: DownstreamAdapter) -> None:
        self.adapter = adapter

    def lookup(self, *, idempotency_key: str, tool: str) -> LookupResult:
        adapter = self.adapter
        url = adapter.lookup_url(idempotency_key)
        try:
            # The look-up's trace context goes with it, so the downstream's spans join it.
            response = outbound.get(
                url, timeout=adapter.timeout_seconds, headers=tracing.outgoing_headers()
            )
        except (outbound.OutboundRefused, httpx.HTTPError) as exc:
            return _failed(exc)
        status = response.status_code
        if status in (adapter.not_found_statuses or [404]):
            if _says_not_found(response, idempotency_key):
                return LookupResult(LookupOutcome.NOT_FOUND, f"HTTP {status}")
            # A wrong prefix or a proxy also answers 404; only the downstream's own word for
            # this key may settle a call failed_final.
            return LookupResult(
                LookupOutcome.UNREACHABLE,
                f"HTTP {status} without a body saying not_found for this key",
            )
        if status not in (adapter.found_statuses or [200]):
            return LookupResult(LookupOutcome.UNREACHABLE, f"unexpected HTTP {status}")
        try:
            body = response.json()
        except ValueError:
            return LookupResult(LookupOutcome.MALFORMED, f"HTTP {status} with a non-JSON body")
        if not isinstance(body, dict):
            return LookupResult(LookupOutcome.MALFORMED, "the body is not a JSON object")
        return LookupResult(LookupOutcome.FOUND, f"HTTP {status}", evidence=body)


def _failed(error: Exception) -> LookupResult:
    """A look-up that got no answer, named by ``outbound.failure_of``: refused, no answer in
    time, or unreachable (not sent, or its answer lost). A look-up is a read, so each is asked
    again later alike."""
    failure = outbound.failure_of(error)
    if failure is outbound.Failure.REFUSED:
        return LookupResult(LookupOutcome.REFUSED, URL_REFUSED(error=error))
    if failure is outbound.Failure.TIMED_OUT:
        return LookupResult(LookupOutcome.TIMEOUT, f"no answer in time: {error}")
    return LookupResult(LookupOutcome.UNREACHABLE, f"{type(error).__name__}: {error}")


def _says_not_found(response: httpx.Response, idempotency_key: str) -> bool:
    """The body is a JSON object with ``state`` (or ``error``) ``"not_found"`` and the key."""
    try:
        body = response.json()
    except ValueError:
        return False
    return (
        isinstance(body, dict)
        and "not_found" in (body.get("state"), body.get("error"))
        and body.get("idempotency_key") == idempotency_key
    )


def lookup_for(adapter: DownstreamAdapter) -> DownstreamLookup:
    if adapter.kind == DownstreamAdapter.Kind.HTTP:
        return HttpLookup(adapter)
    module_name, _, attribute = adapter.python_path.partition(":")
    allowed = settings.LEDGER_ADAPTER_MODULES
    if not any(module_name == m or module_name.startswith(m + ".") for m in allowed):
        raise PermissionError(f"{module_name!r} is not in LEDGER_ADAPTER_MODULES")
    if adapter.tenant_id != adapter.tool.tenant_id:
        raise PermissionError("the adapter and its tool belong to different tenants")
    factory = getattr(importlib.import_module(module_name), attribute)
    return factory(adapter) if callable(factory) else factory
