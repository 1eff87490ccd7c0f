"""The linear redactor gives the same output as the plain patterns it replaces (kept here as
the reference: each was free to start anywhere, which made long unbroken runs quadratic) on
text as people and tools write it."""

from __future__ import annotations

import re

from hypothesis import given
from hypothesis import strategies as st

from ledger.redaction import _redact_card, redact_text

_REFERENCE_EMAIL = re.compile(r"[A-Za-z0-9._%+-]+@[A-Za-z0-9.-]+\.[A-Za-z]{2,}")
_REFERENCE_TOKEN = re.compile(
    r"\b(?:Bearer\s+[A-Za-z0-9._~+/-]+=*|sk_(?:live|test)_[A-Za-z0-9]{8,}|"
    r"gh[pousr]_[A-Za-z0-9]{20,}|xox[abprs]-[A-Za-z0-9-]{10,}|AKIA[0-9A-Z]{16}|"
    r"eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}|al_[A-Za-z0-9_-]{20,})"
)
_REFERENCE_CARD = re.compile(r"\b(?:\d[ -]?){12,18}\d\b")


def _reference(text: str) -> str:
    text = _REFERENCE_TOKEN.sub("[REDACTED:token]", text)
    text = _REFERENCE_EMAIL.sub("[REDACTED:email]", text)
    return _REFERENCE_CARD.sub(_redact_card, text)


_JWT = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV"
_PIECES = st.sampled_from(
    [
        "alice@example.com",
        "bob.smith+tag@mail.example.org",
        "Bearer abc.def-ghi",
        "sk_live_abcdefgh1234",
        "ghp_" + "a" * 24,
        "xoxb-1234567890-abcdef",
        "AKIA" + "A" * 16,
        "al_" + "b" * 24,
        _JWT,
        "4111 1111 1111 1111",
        "4242-4242-4242-4242",
        "order-42",
        "cart-7",
        "the",
        "total",
        "1234",
        "v1.2.3",
        "https://example.com/a?b=c",
    ]
)
_SEPARATORS = st.sampled_from([" ", ", ", "\n", "; ", " (", ") ", ": ", " = ", '"', " / "])


@given(st.lists(st.tuples(_PIECES, _SEPARATORS), max_size=12))
def test_the_linear_redactor_redacts_as_the_reference_patterns_do(pairs) -> None:
    text = "".join(piece + separator for piece, separator in pairs)
    assert redact_text(text, limit=10**9) == _reference(text)


def test_secrets_inside_a_longer_word_are_still_found() -> None:
    """Where a secret follows a ``-`` or a ``:`` inside a word, as in names and URLs."""
    for text in (
        "prod-xoxb-1234567890-abcdefghij",
        f"auth-{_JWT}",
        "key-al_abcdefghijklmnopqrstuvwxyz",
        "mailto:very.long.local.part.used.by.some.bulk.mailer.systems.bounce+tag12345@example.com",
    ):
        assert "[REDACTED" in redact_text(text), text
