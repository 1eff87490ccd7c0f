"""Outbound requests the ledger makes on a user's behalf (alert webhooks) go only to allowed
hosts: never, by default, to loopback, private, link-local or other non-public addresses,
checked on every address the name resolves to, and redirects are not followed. A webhook URL
is someone's input; without this it is a way to reach the ledger's own network (SSRF)."""

from __future__ import annotations

import ipaddress
import socket
from typing import Any
from urllib.parse import urlsplit

import httpx
from django.conf import settings


class OutboundRefused(ValueError):
    """The URL's host is not allowed (named in the message)."""


def check_url(url: str) -> None:
    """Raise ``OutboundRefused`` unless ``url`` is http(s) to a host the settings allow,
    resolving to public addresses only (unless private networks are allowed)."""
    parts = urlsplit(url)
    if parts.scheme not in {"http", "https"} or not parts.hostname:
        raise OutboundRefused("only http(s) URLs with a host are allowed")
    host = parts.hostname.lower()
    allowed = [h.lower() for h in settings.LEDGER_OUTBOUND_ALLOWED_HOSTS]
    if allowed and not any(host == h or host.endswith("." + h.lstrip(".")) for h in allowed):
        raise OutboundRefused(f"{host} is not in LEDGER_OUTBOUND_ALLOWED_HOSTS")
    if settings.LEDGER_OUTBOUND_ALLOW_PRIVATE:
        return
    try:
        infos = socket.getaddrinfo(host, parts.port or 443, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as exc:
        raise OutboundRefused(f"{host} does not resolve ({exc})") from None
    for info in infos:
        address = ipaddress.ip_address(str(info[4][0]).split("%", 1)[0])
        if not address.is_global or address.is_multicast:
            raise OutboundRefused(
                f"{host} resolves to {address}, a non-public address "
                "(LEDGER_OUTBOUND_ALLOW_PRIVATE allows it)"
            )


def post_json(url: str, payload: Any, *, timeout: float = 5) -> httpx.Response:
    """POST ``payload`` to an allowed ``url`` (checked again now: DNS may have changed), never
    following a redirect."""
    check_url(url)
    # No proxy from the environment either: the request goes where it was checked to go.
    return httpx.post(url, json=payload, timeout=timeout, follow_redirects=False, trust_env=False)
