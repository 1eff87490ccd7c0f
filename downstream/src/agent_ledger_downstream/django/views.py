"""The ``@idempotent`` decorator for function views, and the look-up the ledger reads."""

from __future__ import annotations

import functools
from collections.abc import Callable
from datetime import timedelta
from typing import Any, TypeVar, overload

from django.conf import settings
from django.db import OperationalError, connections, router, transaction
from django.db.models import DateTimeField, ExpressionWrapper
from django.db.models.functions import Now
from django.http import HttpRequest, HttpResponse, HttpResponseBase
from django.urls import URLPattern, re_path
from django.views.decorators.http import require_GET

from agent_ledger_downstream.django.models import IdempotencyKey
from agent_ledger_downstream.protocol import (
    HEADER,
    LOCK_NOT_AVAILABLE,
    REQUEST_LOCK_WAIT,
    SCOPE_PARAMETER,
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
)

View = TypeVar("View", bound=Callable[..., HttpResponseBase])
CallerScope = Callable[[HttpRequest], str]
#: How long a stored response is kept unless ``AGENT_LEDGER_DOWNSTREAM_RETENTION`` says.
DEFAULT_RETENTION = timedelta(days=7)


def authenticated_caller(request: HttpRequest) -> str:
    """The default scope: the username of the authenticated user, or ``""`` (one scope for
    every caller) when the request has none."""
    user = getattr(request, "user", None)
    if user is not None and user.is_authenticated:
        return str(user.get_username())
    return ""


@overload
def idempotent(view: View, /) -> View: ...
@overload
def idempotent(*, scope: CallerScope = ..., redact: Redact = ...) -> Callable[[View], View]: ...
def idempotent(
    view: View | None = None,
    /,
    *,
    scope: CallerScope = authenticated_caller,
    redact: Redact = redact_secrets,
) -> View | Callable[[View], View]:
    """Run ``view`` at most once per ``Idempotency-Key``, inside one transaction that holds
    the route's writes and its stored response together; a duplicate gets the stored response,
    another payload under the key 422, a request while the first runs 409. Keys belong to the
    caller ``scope(request)`` names, so one client's key never replays to another; ``redact``
    turns a JSON response body into what is stored, replayed and looked up."""
    if view is None:
        return functools.partial(_idempotent, scope=scope, redact=redact)
    return _idempotent(view, scope=scope, redact=redact)


def _idempotent(view: View, *, scope: CallerScope, redact: Redact) -> View:
    @functools.wraps(view)
    def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponseBase:
        try:
            key = parse_key(request.headers.get(HEADER))
        except Problem as problem:
            return _response(problem.answer())
        caller = scope(request)
        using = router.db_for_write(IdempotencyKey)
        # The view runs in this block, so Django refuses its transaction.commit() and
        # set_autocommit() (TransactionManagementError): the key's lock lasts until the end.
        with transaction.atomic(using=using):
            # The lock comes before the body: while a slow upload is still arriving the
            # look-up already answers "in progress", never "not found" for a request that runs.
            if not _lock_for_request(using, caller, key):
                return _response(in_progress().answer())
            request_fingerprint = fingerprint(
                method=request.method or "",
                path=request.get_full_path(),
                body=request.body,
                content_type=request.content_type or "",
            )
            stored = _load(using, caller, key)
            decision = decide(stored, request_fingerprint)
            if decision is ReplayDecision.REPLAY:
                assert stored is not None
                return _response(replay(stored))
            if decision is ReplayDecision.MISMATCH:
                return _response(mismatch().answer())
            response = view(request, *args, **kwargs)
            if not keeps(response.status_code):
                transaction.set_rollback(True, using=using)
                return response
            if not isinstance(response, HttpResponse):
                raise TypeError("an @idempotent view returns a complete (not streaming) response")
            IdempotencyKey.objects.using(using).create(
                scope=caller,
                key=key,
                fingerprint=request_fingerprint,
                method=request.method or "",
                path=stored_path(request.get_full_path()),
                status=response.status_code,
                content_type=response.get("Content-Type", ""),
                body=stored_body(response.content, response.get("Content-Type", ""), redact),
            )
        return response

    return wrapper  # type: ignore[return-value]


def token_check(secret: str) -> Callable[[HttpRequest], bool]:
    """A look-up check accepting ``Authorization: Bearer <secret>`` or ``?access_token=``."""

    def check(request: HttpRequest) -> bool:
        return token_matches(
            secret,
            authorization=request.headers.get("Authorization"),
            query_token=request.GET.get("access_token"),
        )

    return check


def lookup_urls(*, check: Callable[[HttpRequest], bool]) -> list[URLPattern]:
    """``idempotency/<key>?scope=<caller>`` for ``include()``: found (200), not found (404) or
    in progress (409), answered only to requests ``check`` accepts."""

    @require_GET
    def lookup(request: HttpRequest, key: str) -> HttpResponse:
        if not check(request):
            return _response(lookup_refused())
        caller = request.GET.get(SCOPE_PARAMETER, "")
        return _response(look_up(key, scope=caller))

    # Any text after the prefix, line breaks included, so the look-up itself refuses a key it
    # cannot take (a problem) rather than the URL resolver (a bare 404, which reads as absent).
    pattern = r"^idempotency/(?P<key>(?s:.*))\Z"
    return [re_path(pattern, lookup, name="agent_ledger_idempotency_lookup")]


def look_up(key: str, *, scope: str = "") -> Answer:
    """What the service knows of ``key``. Not found is only said when no transaction holds the
    key's lock, so a request that is about to commit is never reported as not done; a key or
    scope no request could have used is a 400 problem."""
    try:
        check_key(key)
        check_scope(scope)
    except Problem as problem:
        return problem.answer()
    using = router.db_for_write(IdempotencyKey)
    stored = _load(using, scope, key)
    if stored is None:
        outermost = not connections[using].in_atomic_block
        with transaction.atomic(using=using):
            # READ COMMITTED whatever the connection's default: the re-load after the lock
            # sees a request that committed after the first load.
            if outermost:
                with connections[using].cursor() as cursor:
                    cursor.execute("SET TRANSACTION ISOLATION LEVEL READ COMMITTED")
            if not _lock_for_lookup(using, scope, key):
                return lookup_in_progress(key)
            stored = _load(using, scope, key)
    return lookup_found(stored) if stored else lookup_not_found(key)


def delete_expired(
    *, retention: timedelta | None = None, batch_size: int = 1000, max_batches: int = 100
) -> int:
    """Delete stored responses older than the retention (at least a day), ``batch_size`` rows
    a statement so no delete holds locks for long; returns how many went."""
    keep = retention
    if keep is None:
        keep = getattr(settings, "AGENT_LEDGER_DOWNSTREAM_RETENTION", DEFAULT_RETENTION)
    check_cleanup_limits(retention=keep, batch_size=batch_size, max_batches=max_batches)
    # PostgreSQL's clock, the one created_at was written with.
    cutoff = ExpressionWrapper(Now() - keep, output_field=DateTimeField())
    using = router.db_for_write(IdempotencyKey)
    records = IdempotencyKey.objects.using(using)
    deleted = 0
    for _ in range(max_batches):
        batch = list(
            records.filter(created_at__lt=cutoff)
            .order_by("pk")
            .values_list("pk", flat=True)[:batch_size]
        )
        if not batch:
            break
        deleted += records.filter(pk__in=batch).delete()[0]
    return deleted


def _lock_for_request(using: str, scope: str, key: str) -> bool:
    """Take the key's lock for a request, exclusive until the transaction ends, waiting at
    most ``REQUEST_LOCK_WAIT`` (a look-up's read); False: a request with the key runs."""
    with connections[using].cursor() as cursor:
        cursor.execute("SELECT current_setting('lock_timeout')")
        (previous,) = cursor.fetchone() or ("0",)
        try:
            with transaction.atomic(using=using):  # a savepoint, and the timeout's scope
                cursor.execute("SELECT set_config('lock_timeout', %s, true)", [REQUEST_LOCK_WAIT])
                cursor.execute("SELECT pg_advisory_xact_lock(%s)", [lock_id(key, scope)])
                cursor.execute("SELECT set_config('lock_timeout', %s, true)", [previous])
        except OperationalError as exc:
            if getattr(exc.__cause__, "sqlstate", None) != LOCK_NOT_AVAILABLE:
                raise
            return False  # the wait ran out
    return True


def _lock_for_lookup(using: str, scope: str, key: str) -> bool:
    """Take the key's lock for a look-up, shared, without waiting; False: a request runs."""
    with connections[using].cursor() as cursor:
        cursor.execute("SELECT pg_try_advisory_xact_lock_shared(%s)", [lock_id(key, scope)])
        row = cursor.fetchone()
    return bool(row and row[0])


def _load(using: str, scope: str, key: str) -> StoredResponse | None:
    row = IdempotencyKey.objects.using(using).filter(scope=scope, key=key).first()
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


def _response(answer: Answer) -> HttpResponse:
    response = HttpResponse(answer.body, status=answer.status, content_type=answer.content_type)
    for name, value in answer.headers.items():
        response[name] = value
    return response
