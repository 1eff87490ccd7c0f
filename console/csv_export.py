"""A console list as CSV: the rows of the page, the columns it shows.

A cell that a spreadsheet would read as a formula (it starts with ``=``, ``+``, ``-``, ``@``,
a tab or a carriage return) gets a leading apostrophe: tool names, keys and run ids come from
agents, and opening an export must not run what an agent wrote.
"""

from __future__ import annotations

import csv
from collections.abc import Callable, Iterable
from typing import Any

from django.http import HttpResponse

FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def cell(value: object) -> str:
    text = "" if value is None else str(value)
    return f"'{text}" if text.startswith(FORMULA_STARTS) else text


def csv_response(
    filename: str, columns: list[tuple[str, Callable[[Any], object]]], rows: Iterable[Any]
) -> HttpResponse:
    """``rows`` as a CSV download named ``filename``, one column per ``(header, value)``."""
    response = HttpResponse(content_type="text/csv; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="{filename}"'
    writer = csv.writer(response)
    writer.writerow([header for header, _value in columns])
    for row in rows:
        writer.writerow([cell(value(row)) for _header, value in columns])
    return response
