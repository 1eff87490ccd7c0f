"""The client's address, as the console keeps it in sign-in events and denials."""

from __future__ import annotations

from django.conf import settings
from django.http import HttpRequest


def client_address(request: HttpRequest | None) -> str:
    """The client's address: behind the TLS proxy (``SECURE_PROXY_SSL``), the one the proxy
    appended to X-Forwarded-For, since every request would otherwise share the proxy's."""
    if request is None:
        return ""
    forwarded = request.META.get("HTTP_X_FORWARDED_FOR", "")
    if forwarded and getattr(settings, "SECURE_PROXY_SSL_HEADER", None):
        return forwarded.rsplit(",", 1)[-1].strip()
    return str(request.META.get("REMOTE_ADDR", ""))
