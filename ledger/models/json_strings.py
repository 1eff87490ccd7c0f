"""The strings a stored JSON value holds, found by the console's search: a downstream's order
id in an action's recorded result, say.

Each is read from a GIN index of ``JsonStrings`` of the column (``jsonb_path_ops``) and asked
with ``@>``: the index holds a hash of each string, so a search names only values, never the
names of an object's fields. A GIN index of the column itself (``jsonb_ops``) would serve
``col @? '$.** ? (@ == "ord_8f3a")'`` too, but it files array elements with the fields' names,
so a value that is also a field name (``"state"``) reads every row that has that field;
``jsonb_path_ops`` does not serve ``.**`` at all (docs/performance.md, "The console's search
for any id").
"""

from __future__ import annotations

from typing import TypeVar, cast

from django.db.models import Func, JSONField, Model, QuerySet

M = TypeVar("M", bound=Model)


class JsonStrings(Func):
    """Every string at any depth of a JSON column, as a jsonb array (none for SQL NULL).
    Immutable, so it can be indexed; ``strict``, so an array's strings are listed once, not
    again by lax mode's unwrapping. The index and the query compile it to the same text,
    the path written into the SQL (never a parameter), which is what lets the planner match
    the two."""

    template = (
        "jsonb_path_query_array(COALESCE(%(expressions)s, 'null'::jsonb), "
        "'strict $.** ? (@.type() == \"string\")'::jsonpath)"
    )
    output_field = JSONField()


class JsonConcat(Func):
    """Two jsonb arrays as one (``||``)."""

    template = "(%(expressions)s)"
    arg_joiner = " || "
    output_field = JSONField()


def holding_string(rows: QuerySet[M], strings: Func, text: str) -> QuerySet[M]:
    """The ``rows`` whose ``strings`` (a ``JsonStrings`` expression, or a ``JsonConcat`` of
    them) have ``text`` as one element: ``strings @> '["<text>"]'``."""
    # django-stubs types an alias as changing the rows' model; it changes only the query.
    holding = cast("QuerySet[M]", rows.alias(json_strings=strings))
    return holding.filter(json_strings__contains=[text])
