"""Redaction of stored inputs, results and evidence (DESIGN section 10, seed 001).

What is stored depends on the input's data classification: ``restricted`` keeps only a hash,
``confidential`` redacts secrets and personal data and truncates long text, ``public`` and
``internal`` redact secrets and personal data. Secrets are recognised by field name and by shape
(card numbers that pass the Luhn check, e-mail addresses, bearer and API tokens).
"""

from __future__ import annotations

import re
from typing import Any

from ledger.domain import DataClassification
from ledger.keys import fingerprint

SECRET_FIELD = re.compile(
    r"pass(word|wd|phrase)?|secret|token|api[_-]?key|(^|_)auth($|_)|authorization|cookie|"
    r"session|credential|private[_-]?key|card[_-]?(number|no)?|^pan$|cvc|cvv|ssn|iban|^otp$|^pin$",
    re.IGNORECASE,
)
# Each pattern starts only where its run of characters starts (a lookbehind for the same
# class) and bounds what it may backtrack over, so the work is linear in the text's length: a
# pattern free to start anywhere inside a long unbroken run rescans the run from every position
# (quadratic; a 1 MB token would hold a web worker for minutes). An address's local part is at
# most 64 characters and its domain 253 (RFC 5321).
_EMAIL = re.compile(
    r"(?<![A-Za-z0-9._%+-])[A-Za-z0-9._%+-]{1,64}@[A-Za-z0-9.-]{1,253}\.[A-Za-z]{2,63}"
)
_TOKEN = re.compile(
    r"\bBearer\s+[A-Za-z0-9._~+/-]+=*|\bsk_(?:live|test)_[A-Za-z0-9]{8,}|"
    r"\bgh[pousr]_[A-Za-z0-9]{20,}|(?<![A-Za-z0-9-])xox[abprs]-[A-Za-z0-9-]{10,}|"
    r"\bAKIA[0-9A-Z]{16}|"
    r"(?<![A-Za-z0-9_-])eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}|"
    r"(?<![A-Za-z0-9_-])al_[A-Za-z0-9_-]{20,}"
)
_CARD_CANDIDATE = re.compile(r"\b(?:\d[ -]?){12,18}\d\b")
MAX_TEXT = 4_000
CONFIDENTIAL_MAX_TEXT = 500
REDACTED = "[REDACTED]"


def _luhn_ok(digits: str) -> bool:
    total = 0
    for index, char in enumerate(reversed(digits)):
        value = int(char)
        if index % 2 == 1:
            value = value * 2 - 9 if value > 4 else value * 2
        total += value
    return total % 10 == 0


def _redact_card(match: re.Match[str]) -> str:
    digits = re.sub(r"\D", "", match.group())
    return "[REDACTED:card]" if 13 <= len(digits) <= 19 and _luhn_ok(digits) else match.group()


def redact_text(text: str, *, limit: int = MAX_TEXT) -> str:
    text = _TOKEN.sub("[REDACTED:token]", text)
    text = _EMAIL.sub("[REDACTED:email]", text)
    text = _CARD_CANDIDATE.sub(_redact_card, text)
    if len(text) > limit:
        text = text[:limit] + f"…[truncated {len(text) - limit} chars]"
    return text


def redact(value: Any, *, limit: int = MAX_TEXT) -> Any:
    """A copy of a JSON value with secrets and personal data replaced."""
    if isinstance(value, dict):
        return {
            key: REDACTED if SECRET_FIELD.search(str(key)) else redact(item, limit=limit)
            for key, item in value.items()
        }
    if isinstance(value, list):
        return [redact(item, limit=limit) for item in value]
    if isinstance(value, str):
        return redact_text(value, limit=limit)
    return value


RESULT_MAX_TEXT = 65_536  # results are handed back to duplicates: keep more of them


def redact_for_storage(
    value: Any, classification: DataClassification, *, limit: int = MAX_TEXT
) -> Any:
    """What may be stored of ``value`` given its data classification.

    Restricted data keeps only a hash (and an error's ``code``, which says nothing about the
    data but tells a duplicate why the call failed).
    """
    if classification is DataClassification.RESTRICTED:
        kept = {"redacted": "restricted", "sha256": fingerprint(value)}
        if isinstance(value, dict) and isinstance(value.get("code"), str):
            kept["code"] = value["code"]
        return kept
    if classification is DataClassification.CONFIDENTIAL:
        return redact(value, limit=CONFIDENTIAL_MAX_TEXT)
    return redact(value, limit=limit)


def is_altered(value: Any) -> bool:
    """Whether a stored value was redacted or truncated, i.e. is not the original."""
    if isinstance(value, dict):
        if value.get("redacted") == "restricted":
            return True
        return any(is_altered(item) for item in value.values())
    if isinstance(value, list):
        return any(is_altered(item) for item in value)
    return isinstance(value, str) and ("[REDACTED" in value or "…[truncated" in value)
