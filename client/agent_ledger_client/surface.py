"""What both drivers offer, declared once: each operation of ``LedgerProtocol`` becomes a
method that the driver runs, blocking for ``LedgerClient`` and a coroutine for
``AsyncLedgerClient``."""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import (
    TYPE_CHECKING,
    Any,
    Concatenate,
    Generic,
    ParamSpec,
    TypeVar,
    overload,
)

import httpx

try:  # optional: the caller's trace context goes with every request when it has one
    from opentelemetry import propagate
except ImportError:  # pragma: no cover - without OpenTelemetry there is no context to send
    propagate = None  # type: ignore[assignment]

from agent_ledger_client.protocol import Flow, LedgerProtocol, Request, api_base, auth_headers

if TYPE_CHECKING:
    from agent_ledger_client.aio import AsyncLedgerClient
    from agent_ledger_client.client import LedgerClient

P = ParamSpec("P")
T = TypeVar("T")


class Operation(Generic[P, T]):
    """A descriptor: ``client.<operation>(...)`` drives the protocol's flow on that client."""

    def __init__(self, flow: Callable[Concatenate[LedgerProtocol, P], Flow[T]]) -> None:
        self.flow = flow
        self.__doc__ = flow.__doc__

    @overload
    def __get__(self, client: None, owner: type) -> Operation[P, T]: ...

    @overload
    def __get__(self, client: LedgerClient, owner: type) -> Callable[P, T]: ...

    @overload
    def __get__(
        self, client: AsyncLedgerClient, owner: type
    ) -> Callable[P, Coroutine[Any, Any, T]]: ...

    def __get__(self, client: Any, owner: type) -> Any:
        if client is None:
            return self

        def bound(*args: P.args, **kwargs: P.kwargs) -> Any:
            return client.drive(self.flow(client.protocol, *args, **kwargs))

        bound.__name__ = self.flow.__name__
        bound.__doc__ = self.flow.__doc__
        return bound


class Surface:
    """The operations and settings the sync and async clients share."""

    def __init__(
        self,
        base_url: str,
        token: str,
        *,
        agent_id: str = "",
        request_timeout: float = 10.0,
        ledger_budget: float | None = None,
        tool_timeouts: dict[str, float] | None = None,
        transport: httpx.BaseTransport | httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.protocol = LedgerProtocol(
            request_timeout=request_timeout,
            ledger_budget=ledger_budget,
            tool_timeouts=tool_timeouts,
        )
        self.api_url = api_base(base_url)
        self.headers = auth_headers(token, agent_id)
        self._http = self._open(transport)

    def _open(self, transport: Any) -> Any:
        """The driver's HTTP client (``transport`` replaces the network, as in tests)."""
        raise NotImplementedError

    @property
    def idempotent_tools(self) -> set[str]:
        """Tools that may run while the ledger is unreachable (read-only ones)."""
        return self.protocol.idempotent_tools

    request = Operation(LedgerProtocol.request)
    register_tool = Operation(LedgerProtocol.register_tool)
    import_mcp_tools = Operation(LedgerProtocol.import_mcp_tools)
    declare_key_fields = Operation(LedgerProtocol.declare_key_fields)
    classify = Operation(LedgerProtocol.classify)
    lookup = Operation(LedgerProtocol.lookup)
    get_call = Operation(LedgerProtocol.get_call)
    ask = Operation(LedgerProtocol.ask)
    call = Operation(LedgerProtocol.call)
    replay = Operation(LedgerProtocol.replay)
    resume = Operation(LedgerProtocol.resume)
    finish_run = Operation(LedgerProtocol.finish_run)
    approvals = Operation(LedgerProtocol.approvals)
    approval = Operation(LedgerProtocol.approval)
    decide_approval = Operation(LedgerProtocol.decide_approval)


def trace_headers() -> dict[str, str]:
    """The caller's current W3C trace context (``traceparent``, ``tracestate``): empty without
    OpenTelemetry or outside a span. Drivers send requests in the caller's own thread or task,
    so this is the caller's context."""
    carrier: dict[str, str] = {}
    if propagate is not None:
        propagate.inject(carrier)
    return carrier


def http_arguments(request: Request) -> dict[str, Any]:
    """The keyword arguments of ``httpx`` for one protocol request."""
    return {
        "method": request.method,
        "url": request.path,
        "json": request.json,
        "params": request.params,
        "headers": {**trace_headers(), **request.headers},
        "timeout": request.timeout,
    }
