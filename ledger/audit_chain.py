"""The audit log's hash chain in plain Python: what an event's digest covers, and the one walk
that checks a chain, whether it is read from the database or from a CSV export.

Each tenant's audit events form a chain (the events of no tenant form one more), ordered by
``seq``: 1, 2, 3, ... with no gap. The event at ``seq`` n stores ``prev_digest``, the digest of
the event at n - 1 (``GENESIS`` for the first), and its own ``digest``::

    digest = sha256(canonical JSON of {"action", "actor", "changes", "created_at", "detail",
                    "event_id", "outcome", "prev_digest", "seq", "source", "target_id",
                    "target_type"}), as 64 lowercase hex digits

Canonical JSON is ``ledger.keys.canonical_json``: keys sorted, no whitespace (``,`` and
``:``), non-ASCII characters as themselves, UTF-8, a float with an integral value written as
an integer. ``event_id`` and ``seq`` are integers, the rest strings: ``created_at`` in UTC as
ISO 8601 with microseconds (``2025-01-31T09:30:00.123456+00:00``), and ``changes`` the sha256
(hex) of the canonical JSON of ``[before, after]``, so that an export can carry that digest
instead of the JSON itself (the console shows it only redacted) and still be verified.

Each field the digest covers is immutable once written; editing one after the event is sealed
changes what its digest would be, removing an event leaves a gap in ``seq``, and an event
slipped in does not carry the digest of the one before it.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from ledger.keys import fingerprint

#: The ``prev_digest`` of a chain's first event.
GENESIS = "0" * 64


@dataclass(frozen=True, slots=True)
class EventContent:
    """What an audit event says, as its digest covers it."""

    event_id: int
    actor: str
    action: str
    target_type: str
    target_id: str
    source: str
    outcome: str
    detail: str
    created_at: datetime
    changes: str  # ``changes_digest(before, after)``


def changes_digest(before: Any, after: Any) -> str:
    """The digest of an event's ``before`` and ``after`` (JSON values, None when absent)."""
    return fingerprint([before, after])


def canonical_time(moment: datetime) -> str:
    """``moment`` as the digest covers it: UTC, ISO 8601, with microseconds."""
    if moment.tzinfo is None:
        raise ValueError("an audit event's time is aware")
    return moment.astimezone(UTC).isoformat(timespec="microseconds")


def event_digest(content: EventContent, *, seq: int, prev_digest: str) -> str:
    """The digest of ``content`` at ``seq`` of its chain, after the event whose digest is
    ``prev_digest``."""
    return fingerprint(_covered(content, seq=seq, prev_digest=prev_digest))


def _covered(content: EventContent, *, seq: int, prev_digest: str) -> dict[str, Any]:
    return {
        "action": content.action,
        "actor": content.actor,
        "changes": content.changes,
        "created_at": canonical_time(content.created_at),
        "detail": content.detail,
        "event_id": content.event_id,
        "outcome": content.outcome,
        "prev_digest": prev_digest,
        "seq": seq,
        "source": content.source,
        "target_id": content.target_id,
        "target_type": content.target_type,
    }


@dataclass(frozen=True, slots=True)
class ChainLink:
    """One sealed event: its content and where the chain holds it."""

    content: EventContent
    seq: int
    prev_digest: str
    digest: str


def seal(contents: Iterable[EventContent], *, after_seq: int, after_digest: str) -> list[ChainLink]:
    """``contents`` chained in the order given, after the event at ``after_seq`` whose digest
    is ``after_digest`` (0 and ``GENESIS`` for a chain's first events)."""
    links: list[ChainLink] = []
    seq, prev = after_seq, after_digest
    for content in contents:
        seq += 1
        digest = event_digest(content, seq=seq, prev_digest=prev)
        links.append(ChainLink(content, seq, prev, digest))
        prev = digest
    return links


class Scope(enum.Enum):
    """How much of a chain a walk is given."""

    #: The whole chain (the database): it starts at seq 1 and has no gap.
    WHOLE = "whole"
    #: A run of it (an export, possibly cut): it starts anywhere, taking its first event's
    #: ``prev_digest`` as given, and has no gap.
    SPAN = "span"
    #: Some of its events (a filtered export): each event must match its digest, and each
    #: event that follows another of the walk must link to it; gaps are counted, not breaks.
    SAMPLE = "sample"


class BreakKind(enum.StrEnum):
    """What the first broken link shows."""

    EDITED = "edited"  # the event's fields do not hash to its digest
    MISSING = "missing"  # a seq is not there: an event was deleted
    DUPLICATE = "duplicate"  # a seq is there twice: an event was inserted
    UNLINKED = "unlinked"  # its prev_digest is not the digest before it: inserted or replaced


_MEANING = {
    BreakKind.EDITED: "its fields do not hash to its digest: it was changed after it was sealed",
    BreakKind.MISSING: "this seq is missing: an event was deleted",
    BreakKind.DUPLICATE: "this seq appears again: one of the events at it was inserted",
    BreakKind.UNLINKED: (
        "its prev_digest is not the digest of the event before it: "
        "an event was inserted, removed or replaced here"
    ),
}


@dataclass(frozen=True, slots=True)
class Break:
    """The first broken link: its kind, the seq where it shows, and the event found there
    (None for a seq that is missing)."""

    kind: BreakKind
    seq: int
    event_id: int | None

    def describe(self) -> str:
        """One line for people: where the chain breaks and what that means."""
        at = f"seq {self.seq}" + (f" (event {self.event_id})" if self.event_id is not None else "")
        return f"{self.kind} at {at}: {_MEANING[self.kind]}"


@dataclass(frozen=True, slots=True)
class Verdict:
    """What a walk found: how many events it checked (up to the first break), the seqs and
    last digest it got through, the gaps it was allowed (``Scope.SAMPLE``), and the first
    break, if any."""

    checked: int
    first_seq: int | None
    last_seq: int | None
    last_digest: str | None
    gaps: int
    broken: Break | None

    @property
    def ok(self) -> bool:
        return self.broken is None


def walk(links: Iterable[ChainLink], *, scope: Scope) -> Verdict:
    """Check ``links``, given in seq order, as a chain of ``scope``; stop at the first
    broken link. At each event, in this order: a seq seen already is a duplicate, a seq
    skipped a missing event, a ``prev_digest`` other than the digest before it an unlinked
    event, and fields that do not hash to its digest an edited one."""
    checked, gaps = 0, 0
    first: int | None = None
    expected_seq, expected_prev = 1, GENESIS
    previous: ChainLink | None = None

    def verdict(broken: Break | None) -> Verdict:
        last = previous
        return Verdict(
            checked,
            first,
            last.seq if last else None,
            last.digest if last else None,
            gaps,
            broken,
        )

    for link in links:
        event_id = link.content.event_id
        if previous is None and scope is not Scope.WHOLE and link.seq > 1:
            expected_seq, expected_prev = link.seq, link.prev_digest  # an anchor taken as given
        if link.seq < expected_seq:
            return verdict(Break(BreakKind.DUPLICATE, link.seq, event_id))
        if link.seq > expected_seq:
            if scope is not Scope.SAMPLE:
                return verdict(Break(BreakKind.MISSING, expected_seq, None))
            gaps += 1
            expected_prev = link.prev_digest
        if link.prev_digest != expected_prev:
            return verdict(Break(BreakKind.UNLINKED, link.seq, event_id))
        if event_digest(link.content, seq=link.seq, prev_digest=link.prev_digest) != link.digest:
            return verdict(Break(BreakKind.EDITED, link.seq, event_id))
        checked += 1
        first = link.seq if first is None else first
        previous = link
        expected_seq, expected_prev = link.seq + 1, link.digest
    return verdict(None)
