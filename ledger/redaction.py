"""Redaction of stored inputs, results, evidence and reasons (DESIGN section 10, seed 001).

What is stored depends on the input's data classification: ``restricted`` keeps only a hash,
``confidential`` redacts secrets and personal data and truncates long text, ``public`` and
``internal`` redact secrets and personal data. A free text a caller or an operator writes (a
reason, an audit event's detail) is redacted as ``internal`` data is. Secrets are recognised by
field name (``secret_name``) and by shape: private keys in PEM blocks, credentials in URLs,
values given to a secret's name (``token=...``, ``"password": "..."``), bearer and API tokens,
JWTs, card numbers that pass the Luhn check and e-mail addresses.
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Any

from ledger.domain import DataClassification
from ledger.keys import fingerprint

# A fencing token is a counter ordering a record's executions, shown wherever the record is.
SECRET_FIELD = re.compile(
    r"pass(word|wd|phrase)?|pwd|secret|(?<!fencing_)(?<!fencing)token|api[_-]?key|"
    r"(^|[_-])auth($|[_-])|authorization|cookie|session|credential|private[_-]?key|signature|"
    r"(^|[_-])sig($|[_-])|jwt|card[_-]?(number|no)?|^pan$|cvc|cvv|ssn|iban|^otp$|^pin$",
    re.IGNORECASE,
)
# A parameter (``?key=...``, ``key=...``) is also secret when it is a key: in a URL it is an API
# key or an idempotency key (which holds user and business ids). A field named ``key`` is not:
# in JSON it is as often a map's or an object store's key.
_SECRET_PARAMETER = re.compile(r"(?:^|[_.-])[Kk][Ee][Yy]$|[a-z]Key$")


_LONGEST_NAME = 128


def secret_name(name: str, *, parameter: bool = False) -> bool:
    """Whether a field of this name holds a secret (its value is stored as ``[REDACTED]``),
    or, with ``parameter``, a query or ``name=value`` parameter of this name does."""
    if len(name) > _LONGEST_NAME:  # judged afresh: remembered, long names would fill memory
        return _judged(name, parameter)
    return _remembered(name, parameter)


def _judged(name: str, parameter: bool) -> bool:
    return SECRET_FIELD.search(name) is not None or (
        parameter and _SECRET_PARAMETER.search(name) is not None
    )


# The same few names come with every call of a tool, and the field pattern's many
# alternatives cost more than the rest of a small input's redaction.
_remembered = lru_cache(maxsize=4096)(_judged)


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


# A PEM block from its BEGIN line to its END line. Its label says what it holds: a key (any
# ``... KEY``, ``... KEY BLOCK``) or anything private is redacted, a certificate is not.
_PEM_BEGIN = re.compile(r"-----BEGIN ([A-Z0-9 ]{1,64})-----", re.IGNORECASE)
_PEM_END = re.compile(r"-----END [A-Z0-9 ]{1,64}-----", re.IGNORECASE)


def _redact_pem(text: str) -> str:
    """Every PEM block holding a key replaced, up to its END line, or to the end of the text
    when it has none (a key cut short is still most of the key)."""
    out: list[str] = []
    pos = 0
    while (begin := _PEM_BEGIN.search(text, pos)) is not None:
        label = begin.group(1).upper()
        if "KEY" not in label and "PRIVATE" not in label:
            out.append(text[pos : begin.end()])
            pos = begin.end()
            continue
        end = _PEM_END.search(text, begin.end())
        out.append(text[pos : begin.start()] + "[REDACTED:key]")
        pos = end.end() if end is not None else len(text)
    out.append(text[pos:])
    return "".join(out)


# A URL's user information with a password (``https://user:pass@host``): all of it, since the
# user part of a token login (``x-access-token:<token>@``) is as telling. The password runs to
# the authority's last ``@`` (a host has none).
_USERINFO = re.compile(r"[^\s/?#@:]*:[^\s/?#]*@")


def _redact_url_credentials(text: str) -> str:
    """Every URL's user information with a password replaced (``https://[REDACTED]@host``)."""
    scheme_end = text.find("://")
    out: list[str] = []
    pos = 0
    while scheme_end >= 0:
        authority = scheme_end + 3
        userinfo = _USERINFO.match(text, authority)
        if userinfo is not None:
            out.append(text[pos:authority] + REDACTED + "@")
            pos = userinfo.end()
        scheme_end = text.find("://", max(authority, pos))
    if not out:
        return text
    out.append(text[pos:])
    return "".join(out)


# What gives a value to a name: ``=`` (a query or form parameter, a setting), ``:`` or ``=``
# after a quoted name (JSON, a Python dict written as text), ``:`` and a space (a header, YAML,
# prose). The separators are found first (``str.find``, at the speed of memchr: a pattern
# would step through every character) and each name read back from its separator; the name
# is judged (``secret_name``) before its value is read, so a name that is not a secret's hides
# nothing after it.
_NAME_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.-")
# A quoted value runs to its closing quote (or the line's end); an unquoted one to the next
# space, or, given to a parameter, to the next ``&`` or ``#``; an authorization scheme
# (``Basic``, ``Bearer``, ...) takes the word after it along. A JSON object or array under a
# secret's name is left to the names inside it.
_QUOTED = r""""(?:[^"\\\n]|\\.)*"?|'(?:[^'\\\n]|\\.)*'?"""
_SCHEME = r"(?:(?:Basic|Bearer|Digest|Negotiate|Token)[ \t]+)?"
_QUOTED_NAME_VALUE = re.compile(rf"[ \t]*({_QUOTED}|[^\s,;{{}}\[\]]+)")
_PARAMETER_VALUE = re.compile(rf"[ \t]*({_QUOTED}|{_SCHEME}[^\s&#\"'<>]+)")
_LABEL_VALUE = re.compile(rf"[ \t]*({_QUOTED}|{_SCHEME}[^\s\"'<>]+)")


def _separators(text: str) -> list[int]:
    """Where ``text`` has a ``=`` or a ``:``, in order."""
    found = []
    for char in "=:":
        at = text.find(char)
        while at >= 0:
            found.append(at)
            at = text.find(char, at + 1)
    found.sort()
    return found


def _redact_assignments(text: str) -> str:
    """The value given to every secret's name in ``text`` replaced (``token=[REDACTED]``)."""
    out: list[str] = []
    pos = 0
    for at in _separators(text):
        if at < pos:
            continue  # inside a value already replaced
        equals = text[at] == "="
        end = at
        while end > pos and text[end - 1] in " \t":
            end -= 1
        quote = text[end - 1] if end > pos and text[end - 1] in "\"'" else ""
        if quote:
            end -= 1
        elif not equals and text[at + 1 : at + 2] not in (" ", "\t"):
            continue  # a URL's scheme or port, a time, a key's parts
        # The name: the run of name characters before the separator (or its closing quote).
        start, floor = end, max(pos, end - _LONGEST_NAME - 1)
        while start > floor and text[start - 1] in _NAME_CHARS:
            start -= 1
        if start == end or end - start > _LONGEST_NAME:
            continue
        if quote and text[start - 1 : start] != quote:
            continue
        parameter = equals and not quote
        if not _remembered(text[start:end], parameter):  # a name is at most _LONGEST_NAME
            continue
        pattern = _QUOTED_NAME_VALUE if quote else _PARAMETER_VALUE if parameter else _LABEL_VALUE
        value = pattern.match(text, at + 1)
        if value is None:
            continue
        given = value.group(1)
        marks = given[0] if given[0] in "\"'" else ""
        out.append(text[pos : value.start(1)] + marks + REDACTED + marks)
        pos = value.end()
    if not out:
        return text
    out.append(text[pos:])
    return "".join(out)


def redact_text(text: str, *, limit: int | None = MAX_TEXT) -> str:
    """``text`` with its secrets and personal data replaced, cut at ``limit`` characters (None:
    kept whole)."""
    # Each shape is looked for only in a text with the characters it needs: most have none.
    if "-----" in text:
        text = _redact_pem(text)
    if "://" in text:
        text = _redact_url_credentials(text)
    if "=" in text or ":" in text:
        text = _redact_assignments(text)
    text = _TOKEN.sub("[REDACTED:token]", text)
    text = _TOKEN_RUN.sub(_redact_jwts, text)
    text = _EMAIL.sub("[REDACTED:email]", text)
    text = _CARD_CANDIDATE.sub(_redact_card, text)
    if limit is not None and len(text) > limit:
        text = text[:limit] + f"…[truncated {len(text) - limit} chars]"
    return text


def redact_for_column(text: str, length: int | None) -> str:
    """``text`` redacted for a column of ``length`` characters (a model field's ``max_length``;
    None for a text column): a marker may be longer than the secret it replaces, so the
    redacted text is cut to fit (after redaction: the cut hides more, never less)."""
    return redact_text(text, limit=None)[:length]


def redact(value: Any, *, limit: int = MAX_TEXT) -> Any:
    """A copy of a JSON value with secrets and personal data replaced."""
    if isinstance(value, dict):
        # A name and its value as two fields (a header or an environment variable as a list
        # of ``{"name": ..., "value": ...}``): the value is the named secret.
        named = value.get("name", value.get("key"))
        secret_value = isinstance(named, str) and secret_name(named)
        return {
            key: REDACTED
            if secret_name(str(key)) or (secret_value and key == "value")
            else redact(item, limit=limit)
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
