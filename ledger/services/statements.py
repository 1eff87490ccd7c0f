"""Building blocks for folding the writes of one state change into one SQL statement.

The hot path pays a round trip per statement, so a change and the audit event that records it
go to PostgreSQL together, as data-modifying CTEs of one statement. The SQL is generated from the
models' metadata and Django's own compiler (identifiers from metadata, values as parameters), so
it follows the schema and never interpolates input.
"""

from __future__ import annotations

from typing import Any

from django.db import connection, models
from django.db.models.sql import UpdateQuery

quote = connection.ops.quote_name


def insert_parts(
    instance: models.Model, *, expressions: dict[str, tuple[str, list[Any]]] | None = None
) -> tuple[str, str, list[Any]]:
    """``(columns, values, params)`` to INSERT ``instance``: every concrete field but the
    primary key, with ``expressions`` (column -> SQL and its parameters) replacing a field's
    value by SQL, such as a CTE's returned id."""
    expressions = expressions or {}
    meta = instance._meta
    columns: list[str] = []
    values: list[str] = []
    params: list[Any] = []
    for field in meta.concrete_fields:
        if field.primary_key:
            continue
        column = field.column or field.name
        columns.append(quote(column))
        if column in expressions:
            sql, sql_params = expressions[column]
            values.append(sql)
            params.extend(sql_params)
            continue
        values.append("%s")
        params.append(field.get_db_prep_save(field.pre_save(instance, add=True), connection))
    return ", ".join(columns), ", ".join(values), params


def update_parts(
    model: type[models.Model], where: dict[str, Any], changes: dict[str, Any]
) -> tuple[str, list[Any]]:
    """``UPDATE ... SET changes WHERE where`` as Django itself would write it."""
    query = UpdateQuery(model)
    query.add_q(models.Q(**where))
    query.add_update_values(changes)
    sql, params = query.get_compiler(connection.alias).as_sql()
    return sql, list(params)


def from_row(model: type[models.Model], row: dict[str, Any], prefix: str) -> models.Model | None:
    """A model instance from the ``prefix``-named columns of a joined row (None when the join
    found nothing), with each field's database converter applied as the ORM would."""
    fields = model._meta.concrete_fields
    if row.get(f"{prefix}{model._meta.pk.column}") is None:
        return None
    values = []
    for field in fields:
        value = row[f"{prefix}{field.column}"]
        column = field.get_col(model._meta.db_table)
        # The backend's converters too (SQLite returns datetimes as text, booleans as 0/1).
        for convert in connection.ops.get_db_converters(column) + column.get_db_converters(
            connection
        ):
            value = convert(value, column, connection)
        values.append(value)
    return model.from_db(connection.alias, [f.attname for f in fields], values)


def select_columns(model: type[models.Model], alias: str, prefix: str) -> str:
    columns = [f.column or f.name for f in model._meta.concrete_fields]
    return ", ".join(f"{alias}.{quote(c)} AS {quote(prefix + c)}" for c in columns)


def fetch_joined(
    sql: str, params: list[Any], parts: dict[str, type[models.Model]]
) -> dict[str, models.Model | None] | None:
    """Run a one-row query whose columns come from ``select_columns`` (prefix -> model) and
    return the instance of each part, or None when there is no row."""
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        names = [column[0] for column in cursor.description or ()]
        found = cursor.fetchone()
    if found is None:
        return None
    row = dict(zip(names, found, strict=True))
    return {prefix: from_row(model, row, prefix) for prefix, model in parts.items()}
