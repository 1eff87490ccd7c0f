"""The audit log's CSV export, and reading one back to verify its hash chain offline.

The export has the page's columns and then the chain's: each event's ``seq``, ``prev_digest``
and ``digest``, and ``changes_digest``, the digest of its ``before`` and ``after`` (which the
export does not carry: the console shows them only redacted). With those, every field an
event's digest covers is in its row (``ledger/audit_chain.py`` says which and how), so an
auditor can recompute each digest and check each link without the database:
``manage.py verify_audit --csv FILE``.
"""

from __future__ import annotations

import csv
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from console.csv_export import Columns, read_cell
from ledger.audit_chain import ChainLink, EventContent, canonical_time, changes_digest

#: The columns of the export: the page's, in its order (the whole detail), then the chain's.
#: ``when`` is written as the digest covers it (UTC, with microseconds); ``target`` is
#: ``type:id``, and a target's type never holds a colon (a model's name, or a fixed word).
AUDIT_COLUMNS: Columns = [
    ("when", lambda e: canonical_time(e.created_at)),
    ("actor", lambda e: e.actor),
    ("action", lambda e: e.action),
    ("outcome", lambda e: e.outcome),
    ("target", lambda e: f"{e.target_type}:{e.target_id}"),
    ("source", lambda e: e.source),
    ("detail", lambda e: e.detail),
    ("event_id", lambda e: e.pk),
    ("seq", lambda e: e.seq),
    ("prev_digest", lambda e: e.prev_digest),
    ("digest", lambda e: e.digest),
    ("changes_digest", lambda e: changes_digest(e.before, e.after)),
]
_READ = {header for header, _value in AUDIT_COLUMNS}
#: How a cut export's last line starts (``console.csv_export.csv_lines``).
_CUT = "# cut at"


@dataclass(frozen=True, slots=True)
class ReadExport:
    """An audit export read back: its sealed rows as links in seq order, how many rows were
    not sealed yet when it was exported (they carry no seal to check), and whether it was cut
    at the export's row limit."""

    links: list[ChainLink]
    unsealed: int
    cut: bool


def read_export(lines: Iterable[str]) -> ReadExport:
    """Read an audit export (its lines, as ``open(path, newline="")`` gives them). Raises
    ValueError, naming the line, for a file that is not one."""
    reader = csv.DictReader(lines)
    missing = _READ - set(reader.fieldnames or ())
    if missing:
        raise ValueError(f"not an audit log export: no {', '.join(sorted(missing))} column")
    links: list[ChainLink] = []
    unsealed, cut = 0, False
    for row in reader:
        if row["when"].startswith(_CUT) and row["event_id"] is None:
            cut = True
            continue
        try:
            link = _link(row)
        except (ValueError, TypeError, AttributeError) as exc:
            raise ValueError(f"line {reader.line_num}: {exc}") from None
        if link is None:
            unsealed += 1
        else:
            links.append(link)
    links.sort(key=lambda link: link.seq)  # the export is newest first, by id
    return ReadExport(links, unsealed, cut)


def _link(row: dict[str, str]) -> ChainLink | None:
    """One row's link, or None for a row not sealed when it was exported."""
    cells = {header: read_cell(row[header]) for header in _READ}
    if not cells["seq"]:
        return None
    target_type, colon, target_id = cells["target"].partition(":")
    if not colon:
        raise ValueError(f"a target without its type: {cells['target']!r}")
    created_at = datetime.fromisoformat(cells["when"])
    if created_at.tzinfo is None:
        raise ValueError(f"a time without its offset: {cells['when']!r}")
    content = EventContent(
        event_id=int(cells["event_id"]),
        actor=cells["actor"],
        action=cells["action"],
        target_type=target_type,
        target_id=target_id,
        source=cells["source"],
        outcome=cells["outcome"],
        detail=cells["detail"],
        created_at=created_at,
        changes=cells["changes_digest"],
    )
    return ChainLink(content, int(cells["seq"]), cells["prev_digest"], cells["digest"])
