"""Outbound requests the ledger makes on a user's behalf (alert webhooks, compensations) go
only to allowed hosts: never, by default, to loopback, private, link-local or other non-public
addresses, checked on every address the name resolves to, and redirects are not followed. A
webhook URL is someone's input; without this it is a way to reach the ledger's own network
(SSRF).

A delivery connects to the very address it checked (the name is resolved once): a name whose
DNS answers a public address to the check and a private one to the connection (DNS
rebinding) cannot steer the request inside. TLS still verifies the certificate against the
URL's host name, sent as SNI."""

from __future__ import annotations

import ipaddress
import socket
from typing import Any
from urllib.parse import SplitResult, urlsplit

import httpx
from django.conf import settings


class OutboundRefused(ValueError):
    """The URL's host is not allowed (named in the message)."""


Address = ipaddress.IPv4Address | ipaddress.IPv6Address


def check_url(url: str) -> None:
    """Raise ``OutboundRefused`` unless ``url`` is http(s) to a host the settings allow,
    resolving to public addresses only (unless private networks are allowed)."""
    parts = _allowed_parts(url)
    if not settings.LEDGER_OUTBOUND_ALLOW_PRIVATE:
        _checked_addresses(parts)


def post_json(
    url: str, payload: Any, *, timeout: float = 5, headers: dict[str, str] | None = None
) -> httpx.Response:
    """POST ``payload`` to an allowed ``url`` (checked again now: DNS may have changed), on a
    connection to the address that was checked, never following a redirect."""
    parts = _allowed_parts(url)
    address = _checked_addresses(parts)[0]
    host = parts.hostname or ""
    pinned = parts._replace(netloc=_netloc(address, parts.port)).geturl()
    # No proxy from the environment either: the request goes where it was checked to go.
    with httpx.Client(trust_env=False, follow_redirects=False, timeout=timeout) as client:
        return client.post(
            pinned,
            json=payload,
            headers={**(headers or {}), "Host": parts.netloc.rpartition("@")[2]},
            extensions={"sni_hostname": host} if parts.scheme == "https" else {},
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


def _checked_addresses(parts: SplitResult) -> list[Address]:
    """Every address the URL's host resolves to, each public unless private networks are
    allowed."""
    host = (parts.hostname or "").lower()
    default_port = 443 if parts.scheme == "https" else 80
    try:
        infos = socket.getaddrinfo(host, parts.port or default_port, type=socket.SOCK_STREAM)
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


def _netloc(address: Address, port: int | None) -> str:
    shown = f"[{address}]" if address.version == 6 else str(address)
    return f"{shown}:{port}" if port else shown
