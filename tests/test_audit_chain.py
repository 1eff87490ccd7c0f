"""The audit log's hash chain as plain functions: the digest is sha256 of the documented
canonical form, a sealed chain walks clean, and the first edited, missing, duplicated or
unlinked event is named wherever it is."""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Callable
from datetime import UTC, datetime, timedelta, timezone

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ledger.audit_chain import (
    GENESIS,
    Break,
    BreakKind,
    ChainLink,
    EventContent,
    Scope,
    canonical_time,
    changes_digest,
    event_digest,
    seal,
    walk,
)

T0 = datetime(2025, 1, 31, 9, 30, 0, 123456, tzinfo=UTC)


def content(n: int, **changes: object) -> EventContent:
    base = EventContent(
        event_id=100 + n,
        actor=f"actor-{n}",
        action="record.completed",
        target_type="idempotencyrecord",
        target_id=str(n),
        source="api",
        outcome="success",
        detail="",
        created_at=T0 + timedelta(seconds=n),
        changes=changes_digest({"state": "executing"}, {"state": "succeeded"}),
    )
    return dataclasses.replace(base, **changes)  # type: ignore[arg-type]


def chain(n: int) -> list[ChainLink]:
    return seal([content(i) for i in range(1, n + 1)], after_seq=0, after_digest=GENESIS)


def test_the_digest_is_sha256_of_the_documented_canonical_json() -> None:
    """Written out as an auditor would from ledger/audit_chain.py's docstring."""
    event = content(
        1, actor="Zoë", detail='line one\nline "two"', changes=changes_digest({"a": 1}, None)
    )
    by_hand = (
        '{"action":"record.completed","actor":"Zoë","changes":"'
        + hashlib.sha256(b'[{"a":1},null]').hexdigest()
        + '","created_at":"2025-01-31T09:30:01.123456+00:00",'
        '"detail":"line one\\nline \\"two\\"","event_id":101,"outcome":"success",'
        f'"prev_digest":"{GENESIS}","seq":1,"source":"api","target_id":"1",'
        '"target_type":"idempotencyrecord"}'
    )
    expected = hashlib.sha256(by_hand.encode("utf-8")).hexdigest()
    assert event_digest(event, seq=1, prev_digest=GENESIS) == expected


@pytest.mark.parametrize(
    ("moment", "written"),
    [
        (T0, "2025-01-31T09:30:00.123456+00:00"),
        (T0.replace(microsecond=0), "2025-01-31T09:30:00.000000+00:00"),
        (T0.astimezone(timezone(timedelta(hours=8))), "2025-01-31T09:30:00.123456+00:00"),
    ],
)
def test_a_time_is_covered_in_utc_with_microseconds(moment: datetime, written: str) -> None:
    assert canonical_time(moment) == written


def test_a_time_without_its_offset_is_refused() -> None:
    with pytest.raises(ValueError, match="aware"):
        canonical_time(T0.replace(tzinfo=None))


def test_sealing_chains_each_event_to_the_one_before() -> None:
    links = chain(4)
    assert [link.seq for link in links] == [1, 2, 3, 4]
    assert links[0].prev_digest == GENESIS
    assert [link.prev_digest for link in links[1:]] == [link.digest for link in links[:-1]]
    assert len({link.digest for link in links}) == 4


def test_sealing_continues_a_chain_from_its_head() -> None:
    first = chain(3)
    more = seal([content(4), content(5)], after_seq=3, after_digest=first[-1].digest)
    assert more == chain(5)[3:]


@given(st.integers(min_value=0, max_value=30))
def test_a_sealed_chain_walks_clean(n: int) -> None:
    links = chain(n)
    verdict = walk(links, scope=Scope.WHOLE)
    assert verdict.ok and verdict.checked == n and verdict.gaps == 0
    assert verdict.last_digest == (links[-1].digest if links else None)


def _edit(k: int, **changes: object) -> Callable[[list[ChainLink]], list[ChainLink]]:
    def edit(links: list[ChainLink]) -> list[ChainLink]:
        edited = dataclasses.replace(links[k - 1].content, **changes)  # type: ignore[arg-type]
        return [*links[: k - 1], dataclasses.replace(links[k - 1], content=edited), *links[k:]]

    return edit


def _forged(seq: int, prev: str) -> ChainLink:
    event = content(99)
    return ChainLink(event, seq, prev, event_digest(event, seq=seq, prev_digest=prev))


#: A chain of six, tampered with: the first broken link a walk of the whole chain names.
TAMPERED: dict[str, tuple[Callable[[list[ChainLink]], list[ChainLink]], Break]] = {
    "actor edited": (_edit(3, actor="mallory"), Break(BreakKind.EDITED, 3, 103)),
    "outcome edited": (_edit(5, outcome="denied"), Break(BreakKind.EDITED, 5, 105)),
    "time edited": (
        _edit(1, created_at=T0 + timedelta(days=1)), Break(BreakKind.EDITED, 1, 101)
    ),
    "before/after edited": (
        _edit(6, changes=changes_digest(None, {"state": "succeeded"})),
        Break(BreakKind.EDITED, 6, 106),
    ),
    "target edited": (_edit(2, target_id="22"), Break(BreakKind.EDITED, 2, 102)),
    "id edited": (_edit(4, event_id=7), Break(BreakKind.EDITED, 4, 7)),
    "digest replaced": (
        lambda ls: [*ls[:2], dataclasses.replace(ls[2], digest="f" * 64), *ls[3:]],
        Break(BreakKind.EDITED, 3, 103),
    ),
    "first deleted": (lambda ls: ls[1:], Break(BreakKind.MISSING, 1, None)),
    "middle deleted": (lambda ls: [*ls[:3], *ls[4:]], Break(BreakKind.MISSING, 4, None)),
    "deleted and renumbered": (
        lambda ls: [*ls[:3], *(dataclasses.replace(link, seq=link.seq - 1) for link in ls[4:])],
        Break(BreakKind.UNLINKED, 4, 105),
    ),
    "one duplicated": (lambda ls: [*ls[:3], ls[2], *ls[3:]], Break(BreakKind.DUPLICATE, 3, 103)),
    "forged at a taken seq": (
        lambda ls: [*ls[:2], _forged(3, ls[1].digest), *ls[2:]],
        Break(BreakKind.DUPLICATE, 3, 103),
    ),
    "forged at the end, unlinked": (
        lambda ls: [*ls, _forged(7, "a" * 64)],
        Break(BreakKind.UNLINKED, 7, 199),
    ),
    "forged first": (
        lambda ls: [_forged(1, "a" * 64), *ls[1:]],
        Break(BreakKind.UNLINKED, 1, 199),
    ),
    "two swapped": (
        lambda ls: [*ls[:2], ls[3], ls[2], *ls[4:]],
        Break(BreakKind.MISSING, 3, None),
    ),
}  # fmt: skip


@pytest.mark.parametrize("tamper", TAMPERED)
def test_the_walk_names_the_first_broken_link(tamper: str) -> None:
    change, broken = TAMPERED[tamper]
    assert walk(change(chain(6)), scope=Scope.WHOLE).broken == broken


def test_a_broken_walk_says_how_far_the_chain_checks_out() -> None:
    links = chain(6)
    verdict = walk(_edit(4, actor="x")(links), scope=Scope.WHOLE)
    assert (verdict.checked, verdict.last_seq, verdict.last_digest) == (3, 3, links[2].digest)


@given(
    st.integers(min_value=1, max_value=12).flatmap(
        lambda n: st.tuples(st.just(n), st.integers(min_value=1, max_value=n))
    ),
    st.sampled_from(["actor", "action", "target_type", "target_id", "source", "detail"]),
    st.text(max_size=8),
)
def test_any_edit_of_any_event_is_found_where_it_is(
    sizes: tuple[int, int], field: str, suffix: str
) -> None:
    n, k = sizes
    links = chain(n)
    changed = _edit(k, **{field: getattr(links[k - 1].content, field) + suffix + "!"})(links)
    verdict = walk(changed, scope=Scope.WHOLE)
    assert verdict.broken == Break(BreakKind.EDITED, k, 100 + k)


@given(
    st.integers(min_value=2, max_value=12).flatmap(
        lambda n: st.tuples(st.just(n), st.integers(min_value=1, max_value=n - 1))
    )
)
def test_any_deleted_event_but_the_last_is_missing(sizes: tuple[int, int]) -> None:
    n, k = sizes
    links = chain(n)
    verdict = walk([*links[: k - 1], *links[k:]], scope=Scope.WHOLE)
    assert verdict.broken == Break(BreakKind.MISSING, k, None)


def test_a_chain_cut_at_its_end_walks_clean_and_only_a_kept_digest_shows_it() -> None:
    """The chain alone cannot tell its last events from none: the last digest of an earlier
    walk (or export), kept elsewhere, must still be found at its seq (docs/runbook.md)."""
    links = chain(6)
    kept = walk(links, scope=Scope.WHOLE)
    cut = walk(links[:4], scope=Scope.WHOLE)
    assert cut.ok and (cut.last_seq, cut.last_digest) != (kept.last_seq, kept.last_digest)


def test_a_span_starts_anywhere_but_a_whole_chain_at_its_first_event() -> None:
    links = chain(8)[3:]
    span = walk(links, scope=Scope.SPAN)
    assert span.ok and (span.first_seq, span.last_seq, span.checked) == (4, 8, 5)
    assert walk(links, scope=Scope.WHOLE).broken == Break(BreakKind.MISSING, 1, None)


def test_a_span_still_breaks_at_a_gap_or_an_edit() -> None:
    links = chain(8)[3:]
    assert walk([*links[:2], *links[3:]], scope=Scope.SPAN).broken == Break(
        BreakKind.MISSING, 6, None
    )
    edited = _edit(2, detail="x")(links)
    assert walk(edited, scope=Scope.SPAN).broken == Break(BreakKind.EDITED, 5, 105)


def test_a_sample_counts_its_gaps_and_checks_what_it_has() -> None:
    links = chain(10)
    sample = [links[0], links[1], links[4], links[7], links[8]]
    verdict = walk(sample, scope=Scope.SAMPLE)
    assert verdict.ok and verdict.gaps == 2 and verdict.checked == 5
    assert walk(_edit(3, actor="x")(sample), scope=Scope.SAMPLE).broken == Break(
        BreakKind.EDITED, 5, 105
    )
    unlinked = [*sample[:4], dataclasses.replace(sample[4], prev_digest="b" * 64)]
    assert walk(unlinked, scope=Scope.SAMPLE).broken == Break(BreakKind.UNLINKED, 9, 109)


def test_a_break_says_where_and_what_it_means() -> None:
    assert Break(BreakKind.EDITED, 3, 103).describe().startswith("edited at seq 3 (event 103):")
    assert Break(BreakKind.MISSING, 4, None).describe().startswith("missing at seq 4:")
    assert "deleted" in Break(BreakKind.MISSING, 4, None).describe()
    assert "inserted" in Break(BreakKind.DUPLICATE, 4, 9).describe()
