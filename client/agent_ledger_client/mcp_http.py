"""The streamable-HTTP listener of ``agent-ledger-mcp`` and the gate in front of it.

Whoever reaches the listener calls the upstream's tools under the proxy's ledger token, so
every request, on any address, passes ``HttpGate`` first:

- its ``Host`` is the listener's own (the bound ``host:port``, or ``localhost``, ``127.0.0.1``
  or ``[::1]`` at its port) or one given with ``--allowed-host``, else 421; and its ``Origin``
  is absent or the listener's own origin or one given with ``--allowed-origin``, else 403. A
  page in a browser whose name was rebound to this machine (DNS rebinding) names its own host
  and origin, so it is refused, as the MCP specification's security guidance asks;
- it carries the listener's bearer token (``Authorization: Bearer ...``), compared in constant
  time, else 401. The token is the listener's own, never the ledger's.
"""

from __future__ import annotations

import hmac
from collections.abc import Iterable
from typing import Any

from mcp.server.lowlevel import Server
from mcp.server.transport_security import TransportSecuritySettings
from starlette.datastructures import Headers
from starlette.responses import PlainTextResponse
from starlette.types import ASGIApp, Receive, Scope, Send

#: The names a client on this machine reaches a listener by.
LOOPBACK_NAMES = ("localhost", "127.0.0.1", "[::1]")


def listener_address(value: str) -> tuple[str, int]:
    """``HOST:PORT`` (an IPv6 host in brackets, ``[::1]:8765``) as the host to bind and the
    port; ``ValueError`` for anything else."""
    host, colon, port = value.rpartition(":")
    if not colon or not host or not port.isdigit() or not 0 < int(port) <= 65535:
        raise ValueError(f"{value!r} is not HOST:PORT (a port from 1 to 65535)")
    return host.removeprefix("[").removesuffix("]"), int(port)


def _in_url(host: str) -> str:
    return f"[{host}]" if ":" in host else host


class HttpGate:
    """ASGI middleware: a request reaches ``app`` only with an allowed ``Host`` and ``Origin``
    and the listener's bearer token."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        token: str,
        host: str,
        port: int,
        allowed_hosts: Iterable[str] = (),
        allowed_origins: Iterable[str] = (),
    ) -> None:
        self.app = app
        self.token = token.encode()
        own = [f"{name}:{port}" for name in (_in_url(host), *LOOPBACK_NAMES)]
        self.hosts = {name.lower() for name in (*own, *allowed_hosts)}
        self.origins = {
            origin.lower().rstrip("/")
            for origin in (*(f"http://{name}" for name in own), *allowed_origins)
        }

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self.app(scope, receive, send)
            return
        if scope["type"] != "http":  # the listener speaks HTTP only (no websockets)
            await send({"type": "websocket.close", "code": 1008})
            return
        refusal = self.refusal(Headers(scope=scope))
        if refusal is not None:
            await refusal(scope, receive, send)
            return
        await self.app(scope, receive, send)

    def refusal(self, headers: Headers) -> PlainTextResponse | None:
        """The answer to a request that may not pass, or None."""
        if headers.get("host", "").lower() not in self.hosts:
            return PlainTextResponse("This Host is not served here.", status_code=421)
        origin = headers.get("origin")
        if origin is not None and origin.lower().rstrip("/") not in self.origins:
            return PlainTextResponse("Requests from this Origin are refused.", status_code=403)
        scheme, _, given = headers.get("authorization", "").partition(" ")
        if not (scheme.lower() == "bearer" and hmac.compare_digest(given.encode(), self.token)):
            return PlainTextResponse(
                "A bearer token for this listener is required.",
                status_code=401,
                headers={"WWW-Authenticate": 'Bearer realm="agent-ledger-mcp"'},
            )
        return None


async def serve_http(
    server: Server[Any],
    address: str,
    *,
    token: str,
    allowed_hosts: Iterable[str] = (),
    allowed_origins: Iterable[str] = (),
) -> None:
    """Serve ``server`` over streamable HTTP at ``http://HOST:PORT/mcp`` behind ``HttpGate``."""
    import uvicorn  # a dependency of the MCP SDK's HTTP transport

    host, port = listener_address(address)
    # The gate checks Host and Origin for every request; the SDK's own check (on for loopback
    # hosts only, with lists of its own) would refuse the hosts and origins allowed here.
    app = server.streamable_http_app(
        host=host,
        transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False),
    )
    gate = HttpGate(
        app,
        token=token,
        host=host,
        port=port,
        allowed_hosts=allowed_hosts,
        allowed_origins=allowed_origins,
    )
    config = uvicorn.Config(gate, host=host, port=port, log_level="warning")
    await uvicorn.Server(config).serve()
