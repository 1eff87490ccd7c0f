"""How a message leaves the ledger: by e-mail, or by webhook through the outbound allow-list
(``ledger.outbound``). Threshold alerts and on-call notifications both send through here.

An outcome is described without its target: a webhook URL often carries a token, and an
exception from the HTTP library may quote the URL, so only the exception's type is kept.
"""

from __future__ import annotations

import re
from typing import Any

import httpx
from django.conf import settings
from django.core.mail import send_mail

from ledger import outbound

#: The same rules for the API's schemas and the console's forms. Explicit ASCII classes, not
#: ``\s``: Python, the schema validator and JSON Schema disagree on what ``\s`` matches.
EMAIL_PATTERN = r"^$|^[^@\x00-\x20\x7f]+@[^@\x00-\x20\x7f]+\.[^@\x00-\x20\x7f]+$"
WEBHOOK_PATTERN = r"^$|^https?://[^\x00-\x20\x7f]+$"


def email_problem(address: str) -> str | None:
    """Why ``address`` cannot receive a message, or None."""
    if not address or not re.fullmatch(EMAIL_PATTERN, address) or len(address) > 254:
        return "an e-mail address"
    return None


def webhook_problem(url: str, *, max_length: int) -> str | None:
    """Why ``url`` cannot receive a webhook (its form, its length, the outbound allow-list),
    or None."""
    if not url or not re.fullmatch(WEBHOOK_PATTERN, url) or len(url) > max_length:
        return f"an http(s) URL of at most {max_length} characters"
    try:
        outbound.check_url(url)
    except outbound.OutboundRefused as exc:
        return str(exc)
    return None


class DeliveryFailed(Exception):
    """The message did not go out; the message says why, without the target."""


def send_email(to: str, subject: str, text: str) -> str:
    """Send one e-mail; "sent", or ``DeliveryFailed``."""
    try:
        send_mail(subject, text, settings.DEFAULT_FROM_EMAIL, [to])
    except Exception as exc:  # any mail backend's error: SMTP, socket, configuration
        raise DeliveryFailed(f"e-mail failed: {type(exc).__name__}") from None
    return "sent"


def post_webhook(url: str, payload: dict[str, Any]) -> str:
    """POST ``payload`` to an allowed ``url``; "HTTP <status>" for a 2xx answer, else
    ``DeliveryFailed`` (refused, unreachable, or any other status)."""
    try:
        response = outbound.post_json(url, payload)
    except outbound.OutboundRefused as exc:
        raise DeliveryFailed(f"refused: {exc}") from None
    except httpx.HTTPError as exc:
        raise DeliveryFailed(f"webhook failed: {type(exc).__name__}") from None
    if not 200 <= response.status_code < 300:
        raise DeliveryFailed(f"webhook answered HTTP {response.status_code}")
    return f"HTTP {response.status_code}"


def slack_payload(text: str) -> dict[str, Any]:
    """A Slack-compatible incoming-webhook body (also understood by Mattermost and others)."""
    return {"text": text}
