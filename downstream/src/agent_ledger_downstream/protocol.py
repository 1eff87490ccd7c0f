"""The Idempotency-Key protocol with no I/O: parsing the header, fingerprinting a request,
deciding what a request with a known key gets, and the bodies of every answer.

The framework adapters (``agent_ledger_downstream.django``, ``agent_ledger_downstream.asgi``)
are thin drivers over this module: they read the request, take the lock, load and store the
record, and send what this module says.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any

HEADER = "Idempotency-Key"
#: Set on a response answered from the stored one (the header the draft's examples use).
REPLAYED_HEADER = "Idempotent-Replayed"
#: The longest key: the longest Agent Ledger builds (``ledger.keys.MAX_KEY_LENGTH``), so every
#: key the ledger passes downstream is kept and found.
MAX_KEY_LENGTH = 1024
PROBLEM_TYPE = "application/problem+json"
#: Seconds a client waits before asking again about a key whose request is still running.
RETRY_AFTER_SECONDS = 1
TABLE = "agent_ledger_idempotency_keys"
#: The shortest retention the clean-up accepts: a record deleted while the ledger may still
#: look its call up answers "not found", and the call is retried as if it never ran.
MIN_RETENTION = timedelta(days=1)

#: The look-up's query parameter naming the caller scope a key belongs to.
SCOPE_PARAMETER = "scope"

#: Takes a JSON response body (parsed) and returns what may be stored and replayed.
Redact = Callable[[Any], Any]
REDACTED = "[redacted]"
_SECRET_NAME = re.compile(
    r"secret|token|passw|api[-_]?key|credential|authori[sz]ation|private[-_]?key|cookie", re.I
)


@dataclass(frozen=True, slots=True)
class Answer:
    """A complete HTTP response for a driver to send."""

    status: int
    body: bytes
    content_type: str = PROBLEM_TYPE
    headers: dict[str, str] = field(default_factory=dict)


class Problem(Exception):
    """A request refused before the route runs, answered as RFC 9457 problem+json."""

    def __init__(
        self, status: int, title: str, detail: str, headers: dict[str, str] | None = None
    ) -> None:
        super().__init__(detail)
        self.status = status
        self.title = title
        self.detail = detail
        self.headers = headers or {}

    def answer(self, **extra: Any) -> Answer:
        document = {"type": "about:blank", "title": self.title, "status": self.status}
        document.update(detail=self.detail, **extra)
        return Answer(self.status, _json(document), PROBLEM_TYPE, dict(self.headers))


@dataclass(frozen=True, slots=True)
class StoredResponse:
    """The response a completed request got, kept under its key."""

    key: str
    fingerprint: str
    method: str
    path: str
    status: int
    content_type: str
    body: bytes
    created_at: datetime | None = None


class ReplayDecision(StrEnum):
    EXECUTE = "execute"  # no completed request has this key: run the route
    REPLAY = "replay"  # the same request completed: answer with its stored response
    MISMATCH = "mismatch"  # another payload completed under this key: 422


def parse_key(value: str | None) -> str:
    """The key from an ``Idempotency-Key`` header. The draft makes it a structured-field
    string (``"abc"``); a bare token is accepted too, as most clients send one."""
    if value is None or not value.strip():
        raise Problem(400, "Idempotency-Key is missing", f"This route needs an {HEADER} header.")
    key = value.strip()
    if len(key) >= 2 and key[0] == key[-1] == '"':
        key = key[1:-1].replace('\\"', '"').replace("\\\\", "\\")
    return check_key(key)


def check_key(key: str) -> str:
    """``key`` if a request may use it: 1 to ``MAX_KEY_LENGTH`` printable ASCII characters.
    Anything else is a 400 problem, at a marked route and at the look-up alike (no response
    can be stored under such a key, and PostgreSQL refuses a NUL in a query)."""
    if not key or len(key) > MAX_KEY_LENGTH or not all(" " <= c <= "~" for c in key):
        raise Problem(
            400,
            "Idempotency-Key is invalid",
            f"The key must be 1 to {MAX_KEY_LENGTH} printable ASCII characters.",
        )
    return key


def check_scope(scope: str) -> str:
    """``scope`` if the look-up can ask PostgreSQL for it; a NUL, which no text column holds,
    is a 400 problem."""
    if "\x00" in scope:
        raise Problem(400, "The scope is invalid", "A caller scope cannot hold a NUL character.")
    return scope


def fingerprint(*, method: str, path: str, body: bytes, content_type: str = "") -> str:
    """SHA-256 of what makes two requests the same: method, path and payload. A JSON payload
    is compared by its content, so key order and whitespace do not make it another request."""
    payload = body
    if _is_json(content_type) and body:
        try:
            payload = _json(json.loads(body))
        except (ValueError, RecursionError):  # not JSON, or nested past the parser's depth
            payload = body
    digest = hashlib.sha256()
    for part in (method.upper().encode(), path.encode(), payload):
        digest.update(len(part).to_bytes(8, "big"))
        digest.update(part)
    return digest.hexdigest()


#: How long a request waits for its key's lock (exclusive). A look-up holds the lock shared,
#: for one read, which a request waits out; one held longer is a request with the same key that
#: runs: the second is answered 409. PostgreSQL queues a waiting request ahead of the look-ups
#: that come after it, so look-ups cannot starve it. The wait is PostgreSQL's ``lock_timeout``,
#: set for the lock alone in a savepoint (a lock that times out undoes only the savepoint).
REQUEST_LOCK_WAIT = "500ms"
#: PostgreSQL's SQLSTATE for a lock not taken within ``lock_timeout``.
LOCK_NOT_AVAILABLE = "55P03"


def lock_id(key: str, scope: str = "") -> int:
    """The signed 64-bit number of the PostgreSQL advisory lock a request with ``key`` (from
    the caller ``scope``) holds for its whole transaction: another request, or a look-up, that
    cannot take it knows the key is in progress (``REQUEST_LOCK``, ``LOOKUP_LOCK``)."""
    digest = hashlib.blake2b(_json([TABLE, scope, key]), digest_size=8).digest()
    return int.from_bytes(digest, "big", signed=True)


def decide(stored: StoredResponse | None, request_fingerprint: str) -> ReplayDecision:
    if stored is None:
        return ReplayDecision.EXECUTE
    if hmac.compare_digest(stored.fingerprint, request_fingerprint):
        return ReplayDecision.REPLAY
    return ReplayDecision.MISMATCH


def check_cleanup_limits(*, retention: timedelta, batch_size: int, max_batches: int) -> None:
    """Refuse a clean-up that would delete records the ledger may still need, or run unbounded."""
    if batch_size < 1 or max_batches < 1:
        raise ValueError("batch_size and max_batches are positive")
    if retention < MIN_RETENTION:
        raise ValueError(f"the retention is at least {MIN_RETENTION}")


def keeps(status: int) -> bool:
    """Only a 2xx response is stored, with the route's writes. Anything else rolls the
    transaction back, so the key stays free and a retry runs the route again."""
    return 200 <= status < 300


def in_progress() -> Problem:
    return Problem(
        409,
        "A request with this key is in progress",
        "Another request with this Idempotency-Key has not finished; retry after it has.",
        {"Retry-After": str(RETRY_AFTER_SECONDS)},
    )


def mismatch() -> Problem:
    return Problem(
        422,
        "Idempotency-Key reused with another payload",
        "This key belongs to a request with another method, path or body; use a new key.",
    )


def transaction_ended() -> Problem:
    return Problem(
        500,
        "The route ended its transaction",
        "An idempotent route committed or rolled back the transaction that holds its key; "
        "nothing was stored and its writes are rolled back.",
    )


def replay(stored: StoredResponse) -> Answer:
    return Answer(stored.status, stored.body, stored.content_type, {REPLAYED_HEADER: "true"})


def redact_secrets(document: Any) -> Any:
    """The default redaction: every value under a field named like a secret (token, password,
    secret, API key, credential, authorization, cookie) becomes ``"[redacted]"``, at any depth."""
    if isinstance(document, dict):
        return {
            name: REDACTED if _SECRET_NAME.search(str(name)) else redact_secrets(value)
            for name, value in document.items()
        }
    if isinstance(document, list):
        return [redact_secrets(item) for item in document]
    return document


def stored_body(body: bytes, content_type: str, redact: Redact) -> bytes:
    """The body kept under a key, and so replayed and shown to the look-up: a JSON body through
    ``redact``, anything else as sent."""
    if not _is_json(content_type):
        return body
    try:
        return _json(redact(json.loads(body)))
    except (ValueError, UnicodeDecodeError):
        return body


def stored_path(path: str) -> str:
    """The path kept with a response: without its query string, which may carry secrets."""
    return path.partition("?")[0]


def lookup_found(stored: StoredResponse) -> Answer:
    """200 with the stored response: what the ledger's HTTP adapter takes as found."""
    document: dict[str, Any] = {
        "status": "found",
        "idempotency_key": stored.key,
        "request": {"method": stored.method, "path": stored.path},
        "response": {
            "status": stored.status,
            "content_type": stored.content_type,
            "body": _body_document(stored),
        },
        "created_at": stored.created_at.isoformat() if stored.created_at else None,
    }
    return Answer(200, _json(document), "application/json")


def lookup_not_found(key: str) -> Answer:
    """404: no request with the key committed and none is running, so it is safe to retry."""
    problem = Problem(
        404,
        "No request with this key completed",
        "Nothing was done under this key and no request with it is running; "
        "it is safe to retry with the same key.",
    )
    return problem.answer(idempotency_key=key, state="not_found")


def lookup_in_progress(key: str) -> Answer:
    """409 with Retry-After: the ledger's adapter counts it as "ask again later"."""
    return in_progress().answer(idempotency_key=key, state="in_progress")


def lookup_refused() -> Answer:
    problem = Problem(
        401,
        "Not allowed to look keys up",
        "The look-up needs the credentials this service configured.",
        {"WWW-Authenticate": "Bearer"},
    )
    return problem.answer()


def token_matches(secret: str, *, authorization: str | None, query_token: str | None) -> bool:
    """A bearer token in the Authorization header or the ``access_token`` query parameter
    (RFC 6750, section 2.3: the ledger's HTTP adapter sends a URL and no headers)."""
    if not secret:
        return False
    offered = ""
    if authorization and authorization.lower().startswith("bearer "):
        offered = authorization[7:].strip()
    elif query_token:
        offered = query_token
    return bool(offered) and hmac.compare_digest(offered.encode(), secret.encode())


def _is_json(content_type: str) -> bool:
    return content_type.split(";")[0].strip().lower().endswith("json")


def _body_document(stored: StoredResponse) -> Any:
    if _is_json(stored.content_type):
        try:
            return json.loads(stored.body)
        except (ValueError, UnicodeDecodeError):
            pass
    return stored.body.decode("utf-8", errors="replace")


def _json(document: Any) -> bytes:
    return json.dumps(document, sort_keys=True, separators=(",", ":")).encode()
