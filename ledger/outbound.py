"""Outbound requests the ledger makes on a user's behalf (alert webhooks, compensations,
downstream look-ups) go only to allowed hosts: never, by default, to loopback, private,
link-local or other non-public addresses, checked on every address the name resolves to, and
redirects are not followed. A webhook URL or an adapter's URL template is someone's input;
without this it is a way to reach the ledger's own network (SSRF) and, for a look-up, to store
what it answers as evidence.

Every request goes through one pooled client per process (``client``) whose connections are
opened to the very address that was checked as they were opened (``_CheckedBackend``): a name
whose DNS answers a public address to a check and a private one to the connection (DNS
rebinding) cannot steer a request inside. The URL keeps its host name: TLS verifies the
certificate against it, it is sent as SNI and ``Host``, and a pooled connection serves only
requests to the same host and port. Each request checks its URL again before it is sent (the
settings or DNS may have changed since the connection was opened), follows no redirect, takes
no proxy from the environment and keeps no cookie (the URLs belong to tenants: one tenant's
downstream must never see another's cookies)."""

from __future__ import annotations

import ipaddress
import os
import socket
import threading
from collections.abc import Iterable
from enum import StrEnum
from http.cookiejar import CookieJar, DefaultCookiePolicy
from typing import Any
from urllib.parse import SplitResult, urlsplit

import httpcore
import httpx
from django.conf import settings


class OutboundRefused(ValueError):
    """The URL's host is not allowed (named in the message)."""


class Failure(StrEnum):
    """What a request that failed tells of the downstream (``failure_of``)."""

    REFUSED = "refused"  # the allow-list refused the URL: nothing went out
    NOT_SENT = "not_sent"  # no connection was made: nothing reached the downstream
    TIMED_OUT = "timed_out"  # it went out (or began to) and no answer came in time
    LOST = "lost"  # it went out and the answer was lost: a reset, a body cut short, ...

    @property
    def may_have_arrived(self) -> bool:
        """Whether the downstream may have received the request and acted on it: its outcome
        is unknown, found out by a look-up, never by sending it again."""
        return self in (Failure.TIMED_OUT, Failure.LOST)


#: Raised before a byte of the request is written: refused or timed out connecting (a name
#: that does not resolve is refused by ``_CheckedBackend``), no connection free in the pool, a
#: scheme httpx cannot speak.
_BEFORE_SENDING = (
    httpx.ConnectError,
    httpx.ConnectTimeout,
    httpx.PoolTimeout,
    httpx.UnsupportedProtocol,
)


def failure_of(error: Exception) -> Failure:
    """What ``error``, raised by ``get`` or ``post_json``, tells of the downstream. Only a
    failure known to come before sending is ``NOT_SENT``; any other (a read or write timeout,
    a reset after sending, a body cut short, an error of no known kind) may follow a request
    the downstream acted on."""
    if isinstance(error, OutboundRefused):
        return Failure.REFUSED
    if isinstance(error, _BEFORE_SENDING):
        return Failure.NOT_SENT
    if isinstance(error, httpx.TimeoutException):
        return Failure.TIMED_OUT
    return Failure.LOST


Address = ipaddress.IPv4Address | ipaddress.IPv6Address


def check_url(url: str) -> None:
    """Raise ``OutboundRefused`` unless ``url`` is http(s) to a host the settings allow,
    resolving to public addresses only (unless private networks are allowed)."""
    parts = _allowed_parts(url)
    if not settings.LEDGER_OUTBOUND_ALLOW_PRIVATE:
        _checked_addresses(parts.hostname or "", parts.port or _default_port(parts))


def get(url: str, *, timeout: float, headers: dict[str, str] | None = None) -> httpx.Response:
    """GET an allowed ``url`` (checked now), never following a redirect."""
    check_url(url)
    return client().get(url, timeout=timeout, headers=headers)


def post_json(
    url: str, payload: Any, *, timeout: float = 5, headers: dict[str, str] | None = None
) -> httpx.Response:
    """POST ``payload`` to an allowed ``url`` (checked now), never following a redirect."""
    check_url(url)
    return client().post(url, json=payload, timeout=timeout, headers=headers)


_clients: dict[int, httpx.Client] = {}
_clients_lock = threading.Lock()


def client() -> httpx.Client:
    """The process's pooled client for outbound requests, shared by its threads. A client per
    request would build an SSL context each time: about 35 ms of CPU, which caps a worker near
    two thousand look-ups a minute (docs/performance.md). Per process, so a forked worker never
    shares its parent's sockets. Send through ``get`` and ``post_json``, which check the URL
    first."""
    pid = os.getpid()
    found = _clients.get(pid)
    if found is None:
        with _clients_lock:
            found = _clients.get(pid) or _clients.setdefault(
                pid,
                httpx.Client(
                    transport=_CheckedTransport(),
                    cookies=_NoCookies(),
                    trust_env=False,
                    follow_redirects=False,
                ),
            )
    return found


class _NoCookies(CookieJar):
    """A jar that keeps nothing."""

    def __init__(self) -> None:
        super().__init__(policy=DefaultCookiePolicy(allowed_domains=[]))


class _CheckedBackend(httpcore.SyncBackend):
    """Opens each connection to an address of the host checked at that moment."""

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.NetworkStream:
        address = _checked_addresses(host, port)[0]
        return super().connect_tcp(str(address), port, timeout, local_address, socket_options)


class _CheckedTransport(httpx.HTTPTransport):
    """httpx's transport on a pool whose connections ``_CheckedBackend`` opens: httpx takes
    no network backend, so the pool it builds is replaced by one with httpx's default limits."""

    def __init__(self) -> None:
        super().__init__(trust_env=False)
        self._pool = httpcore.ConnectionPool(
            ssl_context=httpx.create_ssl_context(trust_env=False),
            max_connections=100,
            max_keepalive_connections=20,
            keepalive_expiry=5.0,
            network_backend=_CheckedBackend(),
        )


def _allowed_parts(url: str) -> SplitResult:
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises for a port that is not a number in range
    except ValueError as exc:  # e.g. "Invalid IPv6 URL": not a URL to send anything to
        raise OutboundRefused(f"not a valid URL ({exc})") from None
    if parts.scheme not in {"http", "https"} or not parts.hostname:
        raise OutboundRefused("only http(s) URLs with a host are allowed")
    host = parts.hostname.lower()
    allowed = [h.lower() for h in settings.LEDGER_OUTBOUND_ALLOWED_HOSTS]
    if allowed and not any(host == h or host.endswith("." + h.lstrip(".")) for h in allowed):
        raise OutboundRefused(f"{host} is not in LEDGER_OUTBOUND_ALLOWED_HOSTS")
    return parts


def _default_port(parts: SplitResult) -> int:
    return 443 if parts.scheme == "https" else 80


def _checked_addresses(host: str, port: int) -> list[Address]:
    """Every address ``host`` resolves to, each public unless private networks are allowed."""
    host = host.lower()
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as exc:
        raise OutboundRefused(f"{host} does not resolve ({exc})") from None
    addresses = [ipaddress.ip_address(str(info[4][0]).split("%", 1)[0]) for info in infos]
    if not settings.LEDGER_OUTBOUND_ALLOW_PRIVATE:
        for address in addresses:
            if not address.is_global or address.is_multicast:
                raise OutboundRefused(
                    f"{host} resolves to {address}, a non-public address "
                    "(LEDGER_OUTBOUND_ALLOW_PRIVATE allows it)"
                )
    return addresses
