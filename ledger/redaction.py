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

# A fencing token is a counter ordering a record's executions, shown wherever the record is.
SECRET_FIELD = re.compile(
    r"pass(word|wd|phrase)?|secret|(?<!fencing_)(?<!fencing)token|api[_-]?key|(^|_)auth($|_)|authorization|cookie|"
    r"session|credential|private[_-]?key|card[_-]?(number|no)?|^pan$|cvc|cvv|ssn|iban|^otp$|^pin$",
    re.IGNORECASE,
)
# The work is linear in the text's length: a pattern free to start anywhere inside a long
# unbroken run, and failing there, rescans the rest of the run from every position (quadratic;
# a 1 MB token would hold a web worker for minutes). So an address starts only where its run of
# characters starts (a lookbehind for the same class); patterns that, once they start, match the
# whole run keep ``\b``; and JWTs, which may follow a ``-`` inside a word, are found by splitting
# whole runs at their dots (``_redact_jwts``) rather than by a pattern that would start at every
# ``eyJ``.
_EMAIL = re.compile(r"(?<![A-Za-z0-9._%+-])[A-Za-z0-9._%+-]+@[A-Za-z0-9.-]+\.[A-Za-z]{2,}")
_TOKEN = re.compile(
    r"\b(?:Bearer\s+[A-Za-z0-9._~+/-]+=*|sk_(?:live|test)_[A-Za-z0-9]{8,}|"
    r"gh[pousr]_[A-Za-z0-9]{20,}|xox[abprs]-[A-Za-z0-9-]{10,}|AKIA[0-9A-Z]{16}|"
    r"al_[A-Za-z0-9_-]{20,})"
)
_TOKEN_RUN = re.compile(r"(?<![A-Za-z0-9_.-])[A-Za-z0-9_.-]{27,}")
_JWT_HEAD = re.compile(r"eyJ[A-Za-z0-9_-]{8,}")
_SEGMENT = re.compile(r"[A-Za-z0-9_-]{8,}")


def _redact_jwts(match: re.Match[str]) -> str:
    """A run of token characters with any JWT in it (three base64url segments joined by dots,
    the first a JSON header, ``eyJ``) replaced: its parts between dots are each checked once."""
    run = match.group()
    if "eyJ" not in run:
        return run
    parts = run.split(".")
    out: list[str] = []
    i = 0
    while i < len(parts):
        head = parts[i]
        start = head.find("eyJ")
        while start > 0 and head[start - 1] not in "-_":
            start = head.find("eyJ", start + 1)
        if (
            start >= 0
            and i + 2 < len(parts)
            and _JWT_HEAD.fullmatch(head, start)
            and _SEGMENT.fullmatch(parts[i + 1])
            and _SEGMENT.match(parts[i + 2])
        ):
            tail = parts[i + 2][_SEGMENT.match(parts[i + 2]).end() :]  # type: ignore[union-attr]
            out.append(head[:start] + "[REDACTED:token]" + tail)
            i += 3
        else:
            out.append(head)
            i += 1
    return ".".join(out)


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
    text = _TOKEN_RUN.sub(_redact_jwts, text)
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

# From least to most restricted.
_STRICTNESS = (
    DataClassification.PUBLIC,
    DataClassification.INTERNAL,
    DataClassification.CONFIDENTIAL,
    DataClassification.RESTRICTED,
)


def strictest(first: str, *others: str) -> DataClassification:
    """The most restricted of the classifications given: what is stored for an action is
    redacted by its own classification, or by its reporting call's if that one asks for more
    (``ledger.records.complete``)."""
    return max((DataClassification(c) for c in (first, *others)), key=_STRICTNESS.index)


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


def is_restricted(value: Any) -> bool:
    """Whether a stored value is what restricted data keeps: its hash, not the data."""
    return isinstance(value, dict) and value.get("redacted") == "restricted"


def is_altered(value: Any) -> bool:
    """Whether a stored value was redacted or truncated, i.e. is not the original."""
    if isinstance(value, dict):
        if is_restricted(value):
            return True
        return any(is_altered(item) for item in value.values())
    if isinstance(value, list):
        return any(is_altered(item) for item in value)
    return isinstance(value, str) and ("[REDACTED" in value or "…[truncated" in value)
