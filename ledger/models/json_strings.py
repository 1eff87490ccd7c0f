"""The strings a stored JSON value holds, found by the console's search: a downstream's order
id in an action's recorded result, say.

``ledger_json_strings(tenant, value)`` (a SQL function of migration 0027) lists every string
at any depth of ``value`` as ``<tenant>:<string>``, a text array; a GIN index of it is asked
with ``@>``. Three things make it fast at any scale (docs/performance.md, "The console's
search for any id"): the array holds values only, never the names of an object's fields
(which a GIN index of the JSON column itself files with its array elements, so a value that
is also a field name reads every row); each string carries its tenant, so a value common in
another tenant is not a common value here; and a statistics object of the expression gives
the planner each string's frequency, so it reads the index for a rare string and the
tenant's rows, stopping at the first matches, for a common one (a partial index's own
statistics are not used for estimates).
"""

from __future__ import annotations

from typing import TypeVar, cast

from django.contrib.postgres.fields import ArrayField
from django.db.models import F, Func, Model, QuerySet, TextField

M = TypeVar("M", bound=Model)


class JsonStrings(Func):
    """``ledger_json_strings(tenant_id, <column>)``: every string of a JSON column of the
    row, each as ``<tenant id>:<string>`` (none for SQL NULL)."""

    function = "ledger_json_strings"
    output_field = ArrayField(TextField())

    def __init__(self, column: str) -> None:
        super().__init__(F("tenant_id"), F(column))


class ArrayConcat(Func):
    """Two text arrays as one (``||``)."""

    template = "(%(expressions)s)"
    arg_joiner = " || "
    output_field = ArrayField(TextField())


def holding_string(rows: QuerySet[M], strings: Func, tenant_id: int, text: str) -> QuerySet[M]:
    """The tenant's ``rows`` whose ``strings`` (a ``JsonStrings`` expression, or an
    ``ArrayConcat`` of them) have ``text``: ``strings @> ARRAY['<tenant id>:<text>']``."""
    # django-stubs types an alias as changing the rows' model; it changes only the query.
    holding = cast("QuerySet[M]", rows.filter(tenant_id=tenant_id).alias(json_strings=strings))
    return holding.filter(json_strings__contains=[f"{tenant_id}:{text}"])
