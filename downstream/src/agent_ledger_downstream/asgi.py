"""ASGI (Starlette, FastAPI): a middleware that gives marked routes Idempotency-Key semantics
in a SQLAlchemy session's transaction, and answers the ledger's look-up.

A marked route writes through ``transaction_session(request)`` and does not commit: the
middleware commits the route's writes and the stored response together, after the route has
answered and before the answer is sent, so a crash leaves either both or neither.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Iterable, Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

from sqlalchemy import (
    BigInteger,
    CheckConstraint,
    Column,
    DateTime,
    Integer,
    LargeBinary,
    MetaData,
    String,
    Table,
    Text,
    UniqueConstraint,
    delete,
    event,
    func,
    insert,
    select,
    text,
)
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from sqlalchemy.orm import Session
from starlette.requests import Request
from starlette.routing import compile_path
from starlette.types import ASGIApp, Message, Receive, Send
from starlette.types import Scope as ASGIScope

from agent_ledger_downstream.protocol import (
    HEADER,
    LOCK_NOT_AVAILABLE,
    MAX_KEY_LENGTH,
    REQUEST_LOCK_WAIT,
    SCOPE_PARAMETER,
    TABLE,
    Answer,
    Problem,
    Redact,
    ReplayDecision,
    StoredResponse,
    check_cleanup_limits,
    check_key,
    check_scope,
    decide,
    fingerprint,
    in_progress,
    keeps,
    lock_id,
    lookup_found,
    lookup_in_progress,
    lookup_not_found,
    lookup_refused,
    mismatch,
    parse_key,
    redact_secrets,
    replay,
    stored_body,
    stored_path,
    token_matches,
    transaction_ended,
)

#: The table's metadata: ``metadata.create_all`` it, or copy the table into your migrations.
metadata = MetaData()
idempotency_keys = Table(
    TABLE,
    metadata,
    Column("id", BigInteger, primary_key=True, autoincrement=True),
    Column("scope", Text, nullable=False, server_default=""),
    Column("key", String(MAX_KEY_LENGTH), nullable=False),
    Column("fingerprint", String(64), nullable=False),
    Column("method", String(16), nullable=False),
    Column("path", Text, nullable=False),
    Column("status", Integer, nullable=False),
    Column("content_type", String(255), nullable=False),
    Column("body", LargeBinary, nullable=False),
    Column(
        "created_at", DateTime(timezone=True), nullable=False, server_default=func.now(), index=True
    ),
    CheckConstraint("status >= 200 AND status < 300", name="idempotency_key_status_2xx"),
    UniqueConstraint("scope", "key", name="idempotency_key_unique_in_scope"),
)

Check = Callable[[Request], bool | Awaitable[bool]]
CallerScope = Callable[[Request], str]
_SESSION = "agent_ledger_downstream.session"


class TransactionEndedError(RuntimeError):
    """An idempotent route tried to commit the transaction the middleware owns."""


def transaction_session(request: Request) -> AsyncSession:
    """The session whose transaction holds this request's writes and its stored response
    (usable as a FastAPI dependency). Flush, never commit: the middleware commits."""
    session = request.scope.get("state", {}).get(_SESSION)
    if not isinstance(session, AsyncSession):
        raise LookupError("this route is not marked idempotent in IdempotencyMiddleware")
    return session


def authenticated_caller(request: Request) -> str:
    """The default scope: the user Starlette's ``AuthenticationMiddleware`` put on the request,
    or ``""`` (one scope for every caller) when there is none."""
    user = request.scope.get("user")
    if user is not None and getattr(user, "is_authenticated", False):
        return str(user.display_name)
    return ""


def token_check(secret: str) -> Check:
    """A look-up check accepting ``Authorization: Bearer <secret>`` or ``?access_token=``."""

    def check(request: Request) -> bool:
        return token_matches(
            secret,
            authorization=request.headers.get("authorization"),
            query_token=request.query_params.get("access_token"),
        )

    return check


class IdempotencyMiddleware:
    """``routes`` are ``"METHOD /path/{param}"`` strings; ``GET <lookup_prefix>/idempotency/
    {key}?scope=<caller>`` answers the ledger when ``check`` accepts the request. ``scope``
    names the caller a request's key belongs to, so one client's key never replays to another;
    ``redact`` turns a JSON response body into what is stored, replayed and looked up."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        sessionmaker: async_sessionmaker[AsyncSession],
        routes: Iterable[str],
        check: Check,
        lookup_prefix: str = "",
        redact: Redact = redact_secrets,
        scope: CallerScope = authenticated_caller,
    ) -> None:
        self.app = app
        self.sessionmaker = sessionmaker
        self.routes = [_route(route) for route in routes]
        self.check = check
        self.lookup_path = f"{lookup_prefix.rstrip('/')}/idempotency/"
        self.redact = redact
        self.scope = scope

    async def __call__(self, scope: ASGIScope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        method, path = scope["method"], scope["path"]
        if method == "GET" and path.startswith(self.lookup_path):
            return await self._lookup(scope, send, path[len(self.lookup_path) :])
        if any(m == method and pattern.match(path) for m, pattern in self.routes):
            return await self._idempotent(scope, receive, send)
        return await self.app(scope, receive, send)

    async def _idempotent(self, scope: ASGIScope, receive: Receive, send: Send) -> None:
        request = Request(scope)
        try:
            key = parse_key(request.headers.get(HEADER))
        except Problem as problem:
            return await _send(send, problem.answer())
        caller = self.scope(request)
        path = scope["path"] + (
            f"?{scope['query_string'].decode()}" if scope["query_string"] else ""
        )
        async with self.sessionmaker() as session:
            # The lock comes before the body: while a slow upload is still arriving the
            # look-up already answers "in progress", never "not found" for a request that runs.
            if not await _lock_for_request(session, caller, key):
                await session.rollback()
                return await _send(send, in_progress().answer())
            body = await _read_body(receive)
            request_fingerprint = fingerprint(
                method=scope["method"],
                path=path,
                body=body,
                content_type=request.headers.get("content-type", ""),
            )
            stored = await _load(session, caller, key)
            decision = decide(stored, request_fingerprint)
            if decision is ReplayDecision.REPLAY:
                assert stored is not None
                await session.rollback()
                return await _send(send, replay(stored))
            if decision is ReplayDecision.MISMATCH:
                await session.rollback()
                return await _send(send, mismatch().answer())
            state = {**scope.get("state", {}), _SESSION: session}
            messages: list[Message] = []

            async def capture(message: Message) -> None:
                messages.append(message)

            try:
                with _route_cannot_end(session) as ended:
                    await self.app({**scope, "state": state}, _replay_body(body, receive), capture)
                status = int(messages[0]["status"]) if messages else 500
                if ended:
                    await session.rollback()
                    messages = _answer_messages(transaction_ended().answer())
                elif keeps(status):
                    content_type = _header(messages[0], b"content-type")
                    await session.execute(
                        insert(idempotency_keys).values(
                            scope=caller,
                            key=key,
                            fingerprint=request_fingerprint,
                            method=scope["method"],
                            path=stored_path(path),
                            status=status,
                            content_type=content_type,
                            body=stored_body(
                                b"".join(m.get("body", b"") for m in messages[1:]),
                                content_type,
                                self.redact,
                            ),
                        )
                    )
                    await session.commit()
                else:
                    await session.rollback()
            except BaseException:
                await session.rollback()
                raise
        for message in messages:
            await send(message)

    async def _lookup(self, scope: ASGIScope, send: Send, key: str) -> None:
        """``key`` is from the decoded path: the ledger quotes it, ``/`` and ``%`` included."""
        request = Request(scope)
        allowed = self.check(request)
        if inspect.isawaitable(allowed):
            allowed = await allowed
        if not allowed:
            return await _send(send, lookup_refused())
        caller = request.query_params.get(SCOPE_PARAMETER, "")
        try:
            check_key(key)
            check_scope(caller)
        except Problem as problem:
            return await _send(send, problem.answer())
        async with self.sessionmaker() as session:
            stored = await _load(session, caller, key)
            await session.rollback()
            if stored is None:
                # A new transaction at READ COMMITTED: the re-load after the lock sees a request
                # that committed since the first load, whatever isolation the engine defaults to.
                await session.execute(text("SET TRANSACTION ISOLATION LEVEL READ COMMITTED"))
                if not await _lock_for_lookup(session, caller, key):
                    await session.rollback()
                    return await _send(send, lookup_in_progress(key))
                stored = await _load(session, caller, key)
                await session.rollback()
        await _send(send, lookup_found(stored) if stored else lookup_not_found(key))


async def delete_expired(
    sessionmaker: async_sessionmaker[AsyncSession],
    *,
    retention: timedelta,
    batch_size: int = 1000,
    max_batches: int = 100,
) -> int:
    """Delete stored responses older than ``retention`` (at least a day), ``batch_size`` rows a
    transaction so no delete holds locks for long; returns how many went."""
    check_cleanup_limits(retention=retention, batch_size=batch_size, max_batches=max_batches)
    # PostgreSQL's clock, the one created_at was written with.
    cutoff = func.now() - retention
    table = idempotency_keys
    deleted = 0
    for _ in range(max_batches):
        batch = (
            select(table.c.id)
            .where(table.c.created_at < cutoff)
            .order_by(table.c.id)
            .limit(batch_size)
        )
        async with sessionmaker() as session, session.begin():
            result = await session.execute(delete(table).where(table.c.id.in_(batch)))
        count = int(getattr(result, "rowcount", 0) or 0)
        deleted += count
        if count < batch_size:
            break
    return deleted


def _route(route: str) -> tuple[str, Any]:
    method, _, template = route.strip().partition(" ")
    if not template.startswith("/"):
        raise ValueError(f"a route is 'METHOD /path', not {route!r}")
    pattern, _format, _convertors = compile_path(template.strip())
    return method.upper(), pattern


async def _lock_for_request(session: AsyncSession, caller: str, key: str) -> bool:
    """Take the key's lock for a request, exclusive until the transaction ends, waiting at
    most ``REQUEST_LOCK_WAIT`` (a look-up's read); False: a request with the key runs."""
    previous = await session.scalar(select(func.current_setting("lock_timeout")))
    try:
        async with session.begin_nested():  # a savepoint, and the timeout's scope
            await session.execute(select(func.set_config("lock_timeout", REQUEST_LOCK_WAIT, True)))
            await session.execute(select(func.pg_advisory_xact_lock(lock_id(key, caller))))
            await session.execute(select(func.set_config("lock_timeout", previous, True)))
    except DBAPIError as exc:
        if getattr(exc.orig, "sqlstate", None) != LOCK_NOT_AVAILABLE:
            raise
        return False  # the wait ran out
    return True


async def _lock_for_lookup(session: AsyncSession, caller: str, key: str) -> bool:
    """Take the key's lock for a look-up, shared, without waiting; False: a request runs."""
    lock = func.pg_try_advisory_xact_lock_shared(lock_id(key, caller))
    return bool(await session.scalar(select(lock)))


async def _load(session: AsyncSession, caller: str, key: str) -> StoredResponse | None:
    table = idempotency_keys
    query = select(table).where(table.c.scope == caller, table.c.key == key)
    row = (await session.execute(query)).first()
    if row is None:
        return None
    return StoredResponse(
        key=row.key,
        fingerprint=row.fingerprint,
        method=row.method,
        path=row.path,
        status=row.status,
        content_type=row.content_type,
        body=bytes(row.body),
        created_at=row.created_at,
    )


async def _read_body(receive: Receive) -> bytes:
    chunks: list[bytes] = []
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            break
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            break
    return b"".join(chunks)


def _replay_body(body: bytes, receive: Receive) -> Receive:
    """The body read for the fingerprint, then the client's own messages (a disconnect)."""
    sent = False

    async def replayed() -> Message:
        nonlocal sent
        if sent:
            return await receive()
        sent = True
        return {"type": "http.request", "body": body, "more_body": False}

    return replayed


def _header(start: Message, name: bytes) -> str:
    for header, value in start.get("headers", []):
        if header.lower() == name:
            return bytes(value).decode("latin-1")
    return ""


@contextmanager
def _route_cannot_end(session: AsyncSession) -> Iterator[list[str]]:
    """While the route runs, a commit raises and a rollback is noted (the yielded list): either
    would end the transaction that holds the key's lock, and with it the only-once promise."""
    ended: list[str] = []

    def refuse_commit(_session: Session) -> None:
        raise TransactionEndedError(
            "an idempotent route does not commit: the middleware commits its writes together "
            "with the stored response"
        )

    def note_rollback(_session: Session) -> None:
        ended.append("rollback")

    sync = session.sync_session
    event.listen(sync, "before_commit", refuse_commit)
    event.listen(sync, "after_rollback", note_rollback)
    try:
        yield ended
    finally:
        event.remove(sync, "before_commit", refuse_commit)
        event.remove(sync, "after_rollback", note_rollback)


def _answer_messages(answer: Answer) -> list[Message]:
    headers = [
        (b"content-type", answer.content_type.encode()),
        (b"content-length", str(len(answer.body)).encode()),
        *((name.lower().encode(), value.encode()) for name, value in answer.headers.items()),
    ]
    return [
        {"type": "http.response.start", "status": answer.status, "headers": headers},
        {"type": "http.response.body", "body": answer.body},
    ]


async def _send(send: Send, answer: Answer) -> None:
    for message in _answer_messages(answer):
        await send(message)
