"""Strict parsing of environment settings.

django-environ reads the values; these helpers refuse anything ambiguous, so a typo such as
``DEBUG=ture`` or ``LEDGER_LEASE_SECONDS=-5`` stops the process at start-up with a message that
names the variable, instead of silently falling back to a default.
"""

from __future__ import annotations

import environ
from django.core.exceptions import ImproperlyConfigured

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}


def strict_bool(env: environ.Env, name: str, *, default: bool) -> bool:
    """Read a boolean that must be spelled as one of true/false, yes/no, on/off, 1/0."""
    raw = env.str(name, default="")
    if raw == "":
        return default
    value = raw.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise ImproperlyConfigured(f"{name}={raw!r} is not a boolean; use true or false.")


def positive_int(env: environ.Env, name: str, *, default: int, maximum: int | None = None) -> int:
    """Read a whole number greater than zero (and at most ``maximum`` when given)."""
    raw = env.str(name, default="")
    if raw == "":
        return default
    try:
        value = int(raw.strip())
    except ValueError:
        raise ImproperlyConfigured(f"{name}={raw!r} is not a whole number.") from None
    if value <= 0:
        raise ImproperlyConfigured(f"{name}={raw!r} must be greater than zero.")
    if maximum is not None and value > maximum:
        raise ImproperlyConfigured(f"{name}={raw!r} must be at most {maximum}.")
    return value


def non_negative_int(env: environ.Env, name: str, *, default: int) -> int:
    """Read a whole number that is zero or more (zero switches the limit it sets off)."""
    raw = env.str(name, default="")
    if raw == "":
        return default
    try:
        value = int(raw.strip())
    except ValueError:
        raise ImproperlyConfigured(f"{name}={raw!r} is not a whole number.") from None
    if value < 0:
        raise ImproperlyConfigured(f"{name}={raw!r} must not be negative.")
    return value


def url_with_scheme(env: environ.Env, name: str, *, default: str, schemes: set[str]) -> str:
    """Read a URL whose scheme is one of ``schemes``."""
    value = env.str(name, default=default).strip()
    scheme = value.split("://", 1)[0] if "://" in value else ""
    if scheme not in schemes:
        allowed = ", ".join(sorted(schemes))
        raise ImproperlyConfigured(f"{name} must be a URL with one of the schemes: {allowed}.")
    return value
