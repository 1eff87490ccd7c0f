"""Building blocks for folding the writes of one state change into one SQL statement.

The hot path pays a round trip per statement, so a change and the audit event that records it
go to PostgreSQL together, as data-modifying CTEs of one statement. The SQL is generated from the
models' metadata (identifiers from metadata, values as parameters), so it follows the schema and
never interpolates input. What depends only on the models (column lists, the shape of an
UPDATE, each column's converters) is worked out once per process, not once per request: it runs
on every tool call (docs/performance.md).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any, TypeVar

from django.db import DEFAULT_DB_ALIAS, NotSupportedError, connection, connections, models
from django.db.backends.utils import CursorWrapper
from django.db.models.sql import UpdateQuery

from ledger.sql.raw_cursor import precompiled_cursor

quote = connection.ops.quote_name


# PostgreSQL's error for a prepared statement whose result columns changed type under it (a
# migration altered a column): the statement must be prepared again.
_CACHED_PLAN_CHANGED = "cached plan must not change result type"


def run_precompiled(sql: str, params: Sequence[Any]) -> tuple[tuple[Any, ...] | None, int]:
    """Run one of the statements this module builds (fixed text, values as parameters) and
    return its first row (None when it returns none) and its row count.

    With server-side binding on (``DATABASE_PREPARED_STATEMENTS``) PostgreSQL prepares each of
    them on its first use on a connection and then neither parses nor plans it again. Only
    these: an ORM query prepared with a generic plan can be far slower than one planned for
    its values (a console page over a million rows: 242 ms at p95 prepared, 59 ms not), while these
    statements look rows up by unique keys, where the generic plan is the right one. A
    migration that changes a column's type invalidates them: outside a transaction the
    connection's prepared statements are dropped and the statement runs once more; inside one
    the error rolls the transaction back, and psycopg drops them with it.

    They are sent with PostgreSQL's own numbered placeholders through a psycopg ``RawCursor``,
    so psycopg does not parse the text for ``%s`` on every call: it caches that parsing only
    for statements under 4 KB and 50 parameters, and the reservation has 71 (0.37 ms a call).
    Not when Django would do more with the text or the cursor (``raw_cursor.precompiled_cursor``).
    """
    db = connections[DEFAULT_DB_ALIAS]  # the wrapper itself: no proxy look-up per attribute
    if not db.settings_dict["OPTIONS"].get("server_side_binding"):
        with db.cursor() as cursor:
            cursor.execute(sql, params)
            return _first_row(cursor), cursor.rowcount
    cursor, sql = precompiled_cursor(db, sql)
    with cursor:
        raw = db.connection
        previous = raw.prepare_threshold
        raw.prepare_threshold = 0  # prepare on first use
        try:
            try:
                cursor.execute(sql, params)
            except NotSupportedError as exc:
                if db.in_atomic_block or _CACHED_PLAN_CHANGED not in str(exc):
                    raise
                cursor.execute("DEALLOCATE ALL")  # psycopg forgets its prepared statements too
                cursor.execute(sql, params)
            return _first_row(cursor), cursor.rowcount
        finally:
            raw.prepare_threshold = previous


def _first_row(cursor: CursorWrapper) -> tuple[Any, ...] | None:
    # psycopg's ``description`` builds a Column object per result column (a joined row has
    # dozens) just to say whether there are any; its result's column count says the same.
    result = cursor.cursor.pgresult
    return cursor.fetchone() if result is not None and result.nfields else None


@dataclass(frozen=True, slots=True)
class DbTime:
    """A time the database fills in: its clock at the statement, plus ``seconds``. Every time
    that decides a lease, a lapse or an expiry is PostgreSQL's, never a process's (DESIGN
    section 3, one clock): a web or worker process with a skewed clock must not move a record
    early or late. ``insert_parts`` writes it as SQL, and so do the columns Django would stamp
    with the process's clock (``auto_now``, ``auto_now_add``)."""

    seconds: float = 0

    def sql(self) -> tuple[str, list[Any]]:
        if not self.seconds:
            return DB_NOW, []
        return f"{DB_NOW} + make_interval(secs => %s::float8)", [float(self.seconds)]


# The database's clock in the statement that decides: the statement's start (after any lock
# an earlier statement of the transaction waited for), as Django's ``Now()`` writes it.
DB_NOW = "statement_timestamp()"


# Field classes whose value of this exact type is stored as it is (``get_db_prep_save`` hands
# it back unchanged), so the hot path need not call it for each of some eighty values a call.
# Not integers: Django types them (int4 or int8 by field), and so must a prepared statement.
_STORED_AS_IS: dict[type[models.Field], type] = {
    models.CharField: str,
    models.TextField: str,
    models.BooleanField: bool,
}


@cache
def _insert_fields(model: type[models.Model]) -> tuple[tuple[models.Field, type | None], ...]:
    """Every concrete field but the primary key, with the value type it stores as it is."""
    return tuple(
        (f, _STORED_AS_IS.get(type(f))) for f in model._meta.concrete_fields if not f.primary_key
    )


def model_field(model: type[models.Model], name: str) -> models.Field:
    """``model``'s concrete field ``name`` (``pk`` for the primary key)."""
    field = model._meta.pk if name == "pk" else model._meta.get_field(name)
    assert isinstance(field, models.Field) and field.column, f"{model.__name__}.{name}"
    return field


def insert_parts(
    instance: models.Model, *, expressions: dict[str, tuple[str, list[Any]]] | None = None
) -> tuple[str, str, list[Any]]:
    """``(columns, values, params)`` to INSERT ``instance``: every concrete field but the
    primary key, with ``expressions`` (column -> SQL and its parameters) replacing a field's
    value by SQL, such as a CTE's returned id."""
    expressions = expressions or {}
    columns: list[str] = []
    values: list[str] = []
    params: list[Any] = []
    db = connections[DEFAULT_DB_ALIAS]  # the wrapper itself: no proxy look-up per field
    for field, as_is in _insert_fields(type(instance)):
        column = str(field.column)
        columns.append(quote(column))
        if column in expressions:
            sql, sql_params = expressions[column]
            values.append(sql)
            params.extend(sql_params)
            continue
        stamped = getattr(field, "auto_now", False) or getattr(field, "auto_now_add", False)
        value = DbTime() if stamped else field.pre_save(instance, add=True)
        if isinstance(value, DbTime):
            sql, sql_params = value.sql()
            values.append(sql)
            params.extend(sql_params)
            setattr(instance, field.attname, None)  # the database's value, unread
            continue
        values.append("%s")
        if value is None or type(value) is as_is:
            params.append(value)
        else:
            params.append(field.get_db_prep_save(value, db))
    return ", ".join(columns), ", ".join(values), params


def insert_returning_id(instance: models.Model) -> None:
    """INSERT ``instance`` (one statement, no ORM query compilation) and set its primary key,
    as ``save(force_insert=True)`` would for a model without save() overrides or signals."""
    sql, params, stamped = _insert_returning_pk(instance)
    row, _count = run_precompiled(sql, params)
    assert row is not None
    _saved_as(instance, row, stamped)


def insert_all(*instances: models.Model) -> None:
    """INSERT each of ``instances`` (unrelated rows, such as a change's attempt and its audit
    event) in one statement and set their primary keys: one round trip instead of one each.
    One statement is atomic by itself."""
    ctes: list[str] = []
    params: list[Any] = []
    stamped_per_instance: list[list[models.Field]] = []
    for n, instance in enumerate(instances):
        sql, instance_params, stamped = _insert_returning_pk(instance)
        ctes.append(f"i{n} AS ({sql})")
        params += instance_params
        stamped_per_instance.append(stamped)
    returned = ", ".join(f"i{n}.*" for n in range(len(instances)))
    tables = ", ".join(f"i{n}" for n in range(len(instances)))
    row, _count = run_precompiled(
        f"WITH {', '.join(ctes)} SELECT {returned} FROM {tables}",  # noqa: S608
        params,
    )
    assert row is not None
    start = 0
    for instance, stamped in zip(instances, stamped_per_instance, strict=True):
        width = 1 + len(stamped)
        _saved_as(instance, row[start : start + width], stamped)
        start += width


def _insert_returning_pk(
    instance: models.Model,
) -> tuple[str, list[Any], list[models.Field]]:
    """``INSERT ... RETURNING`` the primary key of ``instance`` and the times the database
    writes (``DbTime`` values, ``auto_now`` fields), its parameters, and those time fields."""
    meta = instance._meta
    stamped = [
        field
        for field, _as_is in _insert_fields(type(instance))
        if getattr(field, "auto_now", False)
        or getattr(field, "auto_now_add", False)
        or isinstance(getattr(instance, field.attname, None), DbTime)
    ]
    columns, values, params = insert_parts(instance)
    returning = ", ".join(quote(str(f.column)) for f in [meta.pk, *stamped])
    sql = (
        f"INSERT INTO {quote(meta.db_table)} ({columns}) VALUES ({values}) "  # noqa: S608
        f"RETURNING {returning}"
    )
    return sql, params, stamped


def _saved_as(
    instance: models.Model, returned: Sequence[Any], stamped: Sequence[models.Field]
) -> None:
    """Mark ``instance`` saved under the returned primary key, with the times the database
    wrote, as the ORM does after an INSERT."""
    instance.pk = returned[0]
    for field, value in zip(stamped, returned[1:], strict=True):
        setattr(instance, field.attname, value)
    instance._state.adding = False
    instance._state.db = connection.alias


def _is_plain(value: Any) -> bool:
    return not hasattr(value, "resolve_expression")


def _has_plain_shape(where: dict[str, Any], changes: dict[str, Any]) -> bool:
    """Whether ``where`` and ``changes`` fit the precomputed shape: plain values, exact matches
    on non-NULL values and non-empty ``__in`` lists without NULL. Anything else (``IS NULL``,
    an ``F()`` expression, a subquery) is left to Django's compiler."""
    if not all(map(_is_plain, changes.values())):
        return False
    for key, value in where.items():
        if key.endswith("__in"):
            if not isinstance(value, list | tuple | set | frozenset) or not value:
                return False
            if any(v is None or not _is_plain(v) for v in value):
                return False
        elif "__" in key or value is None or not _is_plain(value):
            return False
    return True


def update_parts(
    model: type[models.Model], where: dict[str, Any], changes: dict[str, Any]
) -> tuple[str, list[Any]]:
    """``UPDATE ... SET changes WHERE where``, as Django itself would write it. ``where`` holds
    exact matches and ``__in`` lists; plain values take the precomputed shape of the
    statement, anything else (an ``F()`` expression, say) goes through Django's compiler."""
    if not _has_plain_shape(where, changes):
        return _compiled_update(model, where, changes)
    shape = tuple((k, len(v) if k.endswith("__in") else None) for k, v in where.items())
    sql, set_fields, where_fields = _update_shape(model, shape, tuple(changes))
    params = [
        field.get_db_prep_save(value, connection)
        for field, value in zip(set_fields, changes.values(), strict=True)
    ]
    for (key, _size), field in zip(shape, where_fields, strict=True):
        value = where[key]
        prep = field.get_db_prep_value
        if key.endswith("__in"):
            params.extend(prep(field.get_prep_value(v), connection, prepared=True) for v in value)
        else:
            params.append(prep(field.get_prep_value(value), connection, prepared=True))
    return sql, params


def execute_update(
    model: type[models.Model], where: dict[str, Any], changes: dict[str, Any]
) -> int:
    """``model.objects.filter(**where).update(**changes)`` without compiling a query each
    time (``update_parts``); returns the number of rows changed."""
    sql, params = update_parts(model, where, changes)
    return run_precompiled(sql, params)[1]


def _compiled_update(
    model: type[models.Model], where: dict[str, Any], changes: dict[str, Any]
) -> tuple[str, list[Any]]:
    query = UpdateQuery(model)
    query.add_q(models.Q(**where))
    query.add_update_values(changes)
    sql, params = query.get_compiler(connection.alias).as_sql()
    return sql, list(params)


@cache
def _update_shape(
    model: type[models.Model],
    where: tuple[tuple[str, int | None], ...],
    changes: tuple[str, ...],
) -> tuple[str, tuple[models.Field, ...], tuple[models.Field, ...]]:
    """The SQL of an UPDATE of ``changes`` (field names) matching ``where`` (``name`` or
    ``name__in`` with its list's length), and the fields whose values fill its parameters."""
    meta = model._meta
    table = quote(meta.db_table)
    set_fields = tuple(model_field(model, name) for name in changes)
    assignments = ", ".join(f"{quote(str(field.column))} = %s" for field in set_fields)
    conditions: list[str] = []
    where_fields: list[models.Field] = []
    for key, size in where:
        field = model_field(model, key.removesuffix("__in"))
        column = f"{table}.{quote(str(field.column))}"
        if size is None:
            conditions.append(f"{column} = %s")
        else:
            conditions.append(f"{column} IN ({', '.join(['%s'] * size)})")
        where_fields.append(field)
    sql = f"UPDATE {table} SET {assignments} WHERE ({' AND '.join(conditions)})"  # noqa: S608
    return sql, set_fields, tuple(where_fields)


@cache
def _reader(model: type[models.Model]) -> tuple[list[str], int, list[tuple[int, Any, list[Any]]]]:
    """Each concrete field's attname, the primary key's position, and (position, column,
    converters) for each column the ORM would convert (JSON columns are decoded by field
    converters)."""
    fields = model._meta.concrete_fields
    converters = []
    for index, field in enumerate(fields):
        column = field.get_col(model._meta.db_table)
        functions = connection.ops.get_db_converters(column) + column.get_db_converters(connection)
        if functions:
            converters.append((index, column, functions))
    attnames = [f.attname for f in fields]
    return attnames, attnames.index(model._meta.pk.attname), converters


def from_row(model: type[models.Model], values: tuple[Any, ...]) -> models.Model | None:
    """A model instance from the values of its ``select_columns`` (None when a LEFT JOIN
    found nothing), with each field's database converter applied as the ORM would."""
    db = connections[DEFAULT_DB_ALIAS]
    attnames, pk_index, converters = _reader(model)
    if values[pk_index] is None:
        return None
    converted = list(values)
    for index, column, functions in converters:
        for convert in functions:
            converted[index] = convert(converted[index], column, db)
    return model.from_db(DEFAULT_DB_ALIAS, attnames, converted)


@cache
def table(model: type[models.Model]) -> str:
    """``model``'s table, quoted."""
    return quote(model._meta.db_table)


def column(model: type[models.Model], name: str, alias: str = "") -> str:
    """The column of ``model``'s field ``name`` (``pk`` for the primary key), quoted, under
    table ``alias`` if given: hand-written SQL names columns only through this, so it follows
    the schema."""
    quoted = quote(str(model_field(model, name).column))
    return f"{alias}.{quoted}" if alias else quoted


def select_columns(model: type[models.Model], alias: str) -> str:
    """Every concrete column of ``model`` under table ``alias``, in field order (the order
    ``from_row`` reads them in)."""
    return ", ".join(f"{alias}.{quote(str(f.column))}" for f in model._meta.concrete_fields)


M = TypeVar("M", bound=models.Model)


@dataclass(frozen=True, slots=True)
class JoinedRow:
    """One row of ``fetch_joined``: an instance of each model it selected, typed by the model
    asked for, and the plain values selected after them."""

    instances: dict[type[models.Model], models.Model | None]
    values: tuple[Any, ...]

    def one(self, model: type[M]) -> M:
        """The row's ``model``, which the query's inner join guarantees."""
        instance = self.instances[model]
        if not isinstance(instance, model):
            raise LookupError(f"the row has no {model.__name__}: the query joins it outer")
        return instance

    def optional(self, model: type[M]) -> M | None:
        """The row's ``model``, or None when the query's outer join found none."""
        instance = self.instances[model]
        return instance if isinstance(instance, model) else None


def fetch_joined(
    sql: str,
    params: list[Any],
    models_in_order: tuple[type[models.Model], ...],
    *,
    trailing: int = 0,
) -> JoinedRow | None:
    """Run a one-row query that selects ``select_columns`` of each model in turn (then
    ``trailing`` plain values); its row, or None when there is none. The row is split by
    position: no column names are read back."""
    found, _count = run_precompiled(sql, params)
    if found is None:
        return None
    instances: dict[type[models.Model], models.Model | None] = {}
    start = 0
    for model in models_in_order:
        width = len(model._meta.concrete_fields)
        instances[model] = from_row(model, found[start : start + width])
        start += width
    if start + trailing != len(found) or len(instances) != len(models_in_order):
        raise ValueError(f"the query selected {len(found)} columns for {models_in_order}")
    return JoinedRow(instances, found[start:])
