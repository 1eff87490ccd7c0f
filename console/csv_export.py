"""A console list as CSV: every row its filters match (not only the page shown), the columns
the page shows, streamed as it is read.

Each list's view answers ``format=csv`` with the same filters, so an export is checked for the
role and the tenant exactly as the page is. An export stops after ``MAX_EXPORT_ROWS`` rows; a
cut export ends with a line that says so (narrow the filters, a time range for instance, to
export the rest).

A cell that a spreadsheet would read as a formula (it starts with ``=``, ``+``, ``-``, ``@``,
a tab or a carriage return) gets a leading apostrophe: tool names, keys and run ids come from
agents, and opening an export must not run what an agent wrote. So does a cell that starts
with an apostrophe, so that the text of every cell reads back exactly (``read_cell``): the
audit log's export is verified from its cells (``console.audit_export``).
"""

from __future__ import annotations

import csv
from collections.abc import Callable, Iterable, Iterator
from itertools import islice
from typing import Any

from django.db.models import Q, QuerySet
from django.http import StreamingHttpResponse
from django.utils.http import content_disposition_header

FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")
#: What a cell's text is prefixed with when it starts with a formula's start or with this.
QUOTE = "'"
#: The most rows one export streams: a million rows of a busy tenant would be minutes of a
#: worker and hundreds of megabytes; a time range narrows a larger list.
MAX_EXPORT_ROWS = 100_000
#: Rows read from the database at a time, each batch a query of its own.
CHUNK = 2_000

Columns = list[tuple[str, Callable[[Any], object]]]


def cell(value: object) -> str:
    """``value``'s text as a cell: quoted when a spreadsheet would run it (or it starts with
    the quote itself), empty for None."""
    text = "" if value is None else str(value)
    return QUOTE + text if text.startswith((*FORMULA_STARTS, QUOTE)) else text


def read_cell(written: str) -> str:
    """The text a cell was written from (``cell``'s inverse, but that None reads as "")."""
    return written.removeprefix(QUOTE)


class _Line:
    """A file-like ``csv.writer`` target that hands back each line it is given."""

    def write(self, line: str) -> str:
        return line


def csv_lines(columns: Columns, rows: Iterable[Any]) -> Iterator[str]:
    """The header and one line per row (at most ``MAX_EXPORT_ROWS``), then a line saying the
    export was cut if there were more rows."""
    cap = MAX_EXPORT_ROWS
    writer = csv.writer(_Line())
    yield writer.writerow([header for header, _value in columns])
    read = iter(rows)
    for row in islice(read, cap):
        yield writer.writerow([cell(value(row)) for _header, value in columns])
    if next(read, None) is not None:
        yield writer.writerow([f"# cut at {cap} rows: narrow the filters to export the rest"])


def in_chunks(rows: QuerySet[Any]) -> Iterator[Any]:
    """The rows an export reads of ``rows`` (one more than it writes, to tell it was cut), in
    batches of ``CHUNK`` as the response is sent.

    Each batch is a query of its own that starts after the last row of the one before, by the
    queryset's ordering (keyset pagination), never a server-side cursor: a cursor lives in the
    server connection that declared it, and behind a pooler in transaction mode (PgBouncer)
    the next fetch may go to another (docs/deploy.md). The ordering must name fields only; the
    primary key is added as the last tie-breaker when it is not there.
    """
    ordering = [str(name) for name in rows.query.order_by]
    if not ordering or ordering[-1].lstrip("-") not in ("pk", "id"):
        ordering.append("pk")
    keys = [(name.lstrip("-"), name.startswith("-")) for name in ordering]
    rows = rows.order_by(*ordering)
    wanted = MAX_EXPORT_ROWS + 1
    after: Q | None = None
    while wanted > 0:
        batch = list((rows.filter(after) if after is not None else rows)[: min(CHUNK, wanted)])
        yield from batch
        wanted -= len(batch)
        if len(batch) < CHUNK:
            return
        after = _after([(name, descending, getattr(batch[-1], name)) for name, descending in keys])


def _after(last: list[tuple[str, bool, Any]]) -> Q:
    """The rows that sort after a row whose ordering fields hold these values, in PostgreSQL's
    order (NULLs last ascending, first descending)."""
    name, descending, value = last[0]
    if value is None:
        beyond = Q(**{f"{name}__isnull": False}) if descending else Q(pk__in=[])
        same = Q(**{f"{name}__isnull": True})
    else:
        beyond = Q(**{f"{name}__{'lt' if descending else 'gt'}": value})
        if not descending:
            beyond |= Q(**{f"{name}__isnull": True})
        same = Q(**{name: value})
    if len(last) == 1:
        return beyond
    return beyond | (same & _after(last[1:]))


def csv_response(filename: str, columns: Columns, rows: Iterable[Any]) -> StreamingHttpResponse:
    """``rows`` as a CSV download named ``filename``, one column per ``(header, value)``. A
    queryset is read in chunks as the response is sent."""
    if isinstance(rows, QuerySet):
        rows = in_chunks(rows)
    response = StreamingHttpResponse(
        csv_lines(columns, rows), content_type="text/csv; charset=utf-8"
    )
    response["Content-Disposition"] = content_disposition_header(True, filename)
    return response


def export_href(query: str) -> str:
    """The link of a list's CSV export: the page's filters and ``format=csv``."""
    return f"?{query}&format=csv" if query else "?format=csv"
