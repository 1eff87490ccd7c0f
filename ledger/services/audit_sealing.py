"""Sealing the audit log into its hash chains (``ledger.audit_chain``), and reading a chain
back from the database to verify it.

Events are written unsealed by the statement that records their change: on the hot path that
is the reservation's one statement, with no transaction, from many web processes at once.
Chaining them there would take a per-tenant lock on every tool call. The sealer, the chains'
only writer, comes afterwards instead: for one chain at a time, under a transaction-scoped
advisory lock on that chain, it reads the chain's head (its highest seq) and gives the chain's
visible unsealed events, in id order, the next seqs and their digests.

Why that is correct under concurrency: sealers of one chain take turns on its lock, and each
reads the head after taking it (READ COMMITTED: each statement sees what committed before it
began), so no two give out the same seq and the chain stays contiguous; PostgreSQL holds that
too (the ``audit_chain_seq_unique`` constraint). An event whose transaction commits late (a
smaller id, visible only after larger ones were sealed) is unsealed when a later sealer looks
and simply gets a later seq: the chain's order is seq, not id, and nothing sealed changes.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.db import connection, transaction
from django.db.backends.utils import CursorWrapper
from django.db.models import Max, Q
from django.db.models.functions import Now

from ledger.audit_chain import (
    GENESIS,
    ChainLink,
    EventContent,
    Scope,
    Verdict,
    changes_digest,
    seal,
    walk,
)
from ledger.models import AuditEvent, Tenant
from ledger.sql.statements import column, table

#: Events sealed in one transaction: a thousand rows' digests take milliseconds, and the lock
#: on the chain is held no longer than that.
SEAL_BATCH = 1000
#: Transactions one pass makes at most: a backlog (the events a table held before it was
#: chained, or a sealer down for a day) is sealed over several passes, each well inside the
#: task's time limit.
PASS_BATCHES = 100
#: The advisory lock of a chain is this text's 64-bit hash, seeded with the tenant's id (0 for
#: the chain of events with no tenant): apart from the downstream library's locks by key.
LOCK_NAMESPACE = "agent-ledger audit chain"
#: Rows read at a time when a chain is walked (a server-side cursor).
WALK_CHUNK = 2000


@dataclass(frozen=True, slots=True)
class SealReport:
    """What one sealing pass did: events sealed, chains that had events to seal, chains left
    to another sealer that held their lock, and chains with more to seal when the pass
    reached its bound (the next pass goes on)."""

    sealed: int
    chains: int
    busy: int
    unfinished: int


def content_of(event: AuditEvent) -> EventContent:
    """What ``event``'s digest covers."""
    return EventContent(
        event_id=event.pk,
        actor=event.actor,
        action=event.action,
        target_type=event.target_type,
        target_id=event.target_id,
        source=event.source,
        outcome=event.outcome,
        detail=event.detail,
        created_at=event.created_at,
        changes=changes_digest(event.before, event.after),
    )


def seal_audit_events(
    *, batch_size: int = SEAL_BATCH, max_batches: int = PASS_BATCHES
) -> SealReport:
    """Seal the audit events that are unsealed and visible now, one transaction per chain and
    batch, a batch of each chain in turn (a tenant's backlog does not hold up the others'),
    at most ``max_batches`` of them. Only events up to the highest id when the pass starts: a
    pass ends however fast new events arrive, and the next pass takes those."""
    up_to = AuditEvent.objects.aggregate(last=Max("pk"))["last"]
    if up_to is None:
        return SealReport(0, 0, 0, 0)
    chains = (
        AuditEvent.objects.filter(seq__isnull=True, pk__lte=up_to)
        .values_list("tenant_id", flat=True)
        .distinct()
    )
    pending: list[int | None] = list(chains)
    sealed, busy, batches, found = 0, 0, 0, len(pending)
    while pending and batches < max_batches:
        # This turn's chains; those the bound leaves out, and those with more, wait their turn.
        turn, pending = pending[: max_batches - batches], pending[max_batches - batches :]
        for tenant_id in turn:
            done = _seal_batch(tenant_id, up_to=up_to, batch_size=batch_size)
            batches += 1
            if done is None:
                busy += 1
                continue
            sealed += done
            if done == batch_size:
                pending.append(tenant_id)
    return SealReport(sealed, found, busy, len(pending))


def _seal_batch(tenant_id: int | None, *, up_to: int, batch_size: int) -> int | None:
    """Seal up to ``batch_size`` of the chain's unsealed events with ids up to ``up_to``; how
    many, or None when another sealer holds the chain (it seals them)."""
    with transaction.atomic(), connection.cursor() as cursor:
        # Not waiting: a sealer that holds the chain is sealing it; what that one leaves, the
        # next pass takes.
        cursor.execute(
            "SELECT pg_try_advisory_xact_lock(hashtextextended(%s, %s))",
            [LOCK_NAMESPACE, tenant_id or 0],
        )
        locked = cursor.fetchone()
        if not (locked and locked[0]):
            return None
        chain = AuditEvent.objects.filter(
            Q(tenant__isnull=True) if tenant_id is None else Q(tenant_id=tenant_id)
        )
        head = chain.filter(seq__isnull=False).order_by("-seq").values_list("seq", "digest")
        after_seq, after_digest = head.first() or (0, GENESIS)
        assert after_seq is not None and after_digest is not None  # sealed whole
        unsealed = chain.filter(seq__isnull=True, pk__lte=up_to).order_by("pk")[:batch_size]
        links = seal(
            (content_of(event) for event in unsealed),
            after_seq=after_seq,
            after_digest=after_digest,
        )
        if links:
            _write_seals(cursor, links)
    return len(links)


def _write_seals(cursor: CursorWrapper, links: list[ChainLink]) -> None:
    """Write each link's seal on its unsealed row, in one statement (the trigger allows this
    update, and no other, of an audit row)."""
    t = table(AuditEvent)
    pk, seq, prev, digest = (column(AuditEvent, n) for n in ("pk", "seq", "prev_digest", "digest"))
    sql = (
        f"UPDATE {t} SET {seq} = sealed_seq, {prev} = sealed_prev, {digest} = sealed_digest "  # noqa: S608
        "FROM unnest(%s::bigint[], %s::bigint[], %s::text[], %s::text[]) "
        "AS sealed(sealed_id, sealed_seq, sealed_prev, sealed_digest) "
        f"WHERE {t}.{pk} = sealed_id AND {t}.{seq} IS NULL"
    )
    params: list[list[Any]] = [
        [link.content.event_id for link in links],
        [link.seq for link in links],
        [link.prev_digest for link in links],
        [link.digest for link in links],
    ]
    cursor.execute(sql, params)
    if cursor.rowcount != len(links):
        # Only a sealer writes a seal, and it holds the chain's lock: something else did.
        raise RuntimeError(f"sealed {cursor.rowcount} of {len(links)} audit events")


def chain_links(tenant: Tenant | None) -> Iterator[ChainLink]:
    """``tenant``'s sealed events (None: the chain of events with no tenant) by seq, read in
    chunks."""
    events = (
        AuditEvent.objects.filter(tenant=tenant, seq__isnull=False)
        .order_by("seq")
        .iterator(chunk_size=WALK_CHUNK)
    )
    for event in events:
        assert event.seq is not None and event.prev_digest and event.digest
        yield ChainLink(content_of(event), event.seq, event.prev_digest, event.digest)


def verify_chain(tenant: Tenant | None) -> Verdict:
    """Walk ``tenant``'s whole chain in the database (None: the events of no tenant)."""
    return walk(chain_links(tenant), scope=Scope.WHOLE)


def unsealed_older_than(tenant: Tenant | None, *, seconds: int) -> int:
    """How many of ``tenant``'s events are not sealed yet though written more than
    ``seconds`` ago by the database's clock (the sealer is behind, or not running)."""
    return AuditEvent.objects.filter(
        tenant=tenant, seq__isnull=True, created_at__lt=Now() - timedelta(seconds=seconds)
    ).count()
