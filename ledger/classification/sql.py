"""Per-call classification of SQL carried in a tool's argument (``query``, ``sql``...).

The text is parsed by pglast, which is PostgreSQL's own parser (libpg_query) compiled in: a
statement is split, quoted and nested exactly as the server would (dollar quotes, ``E''``
strings, comments, data-modifying CTEs), and ``EXPLAIN``, ``SHOW``, ``COPY ... PROGRAM`` and
``DO`` come out as typed statements. sqlglot, the pure-Python alternative, turns ``EXPLAIN``,
``SHOW``, ``CALL`` and ``DO`` into an opaque ``Command``, so it could neither allow
``EXPLAIN SELECT`` nor see inside the others. SQL that PostgreSQL's grammar does not accept
(SQLite's ``PRAGMA``, say) is not understood, so it is ``never``.

Only one read-only statement whose every function, operator and cast is known to be free of
side effects is ``auto``; everything else is ``never``, flagged destructive where it destroys.
Text another dialect splits differently (MySQL's ``/*!`` comments and backslash escapes, a
nested comment) is ``never`` too.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from django.utils.translation import gettext_noop
from pglast.parser import ParseError, parse_sql_json

from ledger.classification import Classification
from ledger.domain import Idempotency
from ledger.stored_text import StoredText


def _words(text: str) -> frozenset[str]:
    """A vocabulary written as space-separated words."""
    return frozenset(text.split())


MAX_SQL_LENGTH = 100_000

# Functions that only compute or read. A function not listed here may be user-defined and do
# anything, so it is not read-only: an allow-list, never a deny-list.
READ_ONLY_FUNCTIONS = _words(
    """
    abs avg bit_length bool_and bool_or btrim cardinality cbrt ceil ceiling char_length
    character_length chr coalesce concat concat_ws count current_database current_date
    current_schema current_schemas current_setting current_time current_timestamp current_user
    date_part date_trunc decode div encode every exp extract floor format greatest
    has_table_privilege initcap array_agg array_length array_position array_to_string
    json_agg json_build_array json_build_object json_extract_path json_extract_path_text
    json_object_agg jsonb_agg jsonb_build_array jsonb_build_object jsonb_extract_path
    jsonb_extract_path_text jsonb_object_agg jsonb_path_query jsonb_pretty jsonb_typeof
    json_typeof least left length ln localtime localtimestamp log log10 lower lpad ltrim
    make_date make_interval make_time make_timestamp max md5 min mod now nullif
    octet_length overlaps pg_size_pretty pg_table_size pg_total_relation_size
    pg_relation_size pg_database_size pg_typeof pi position power quote_ident quote_literal
    quote_nullable random_normal regexp_count regexp_like regexp_match regexp_matches
    regexp_replace regexp_split_to_array regexp_split_to_table repeat replace reverse right
    round row_number rank dense_rank percent_rank cume_dist ntile lag lead first_value
    last_value nth_value rpad rtrim session_user sha256 sha512 sign split_part sqrt
    starts_with statement_timestamp stddev stddev_pop stddev_samp string_agg strpos substr
    substring sum timeofday to_char to_date to_hex to_json to_jsonb to_number to_timestamp
    transaction_timestamp translate trim trunc unnest upper user var_pop var_samp variance
    version width_bucket generate_series clock_timestamp age isfinite justify_days
    justify_hours justify_interval array_dims array_lower array_upper array_ndims
    string_to_array array_cat array_append array_prepend array_remove array_replace
    bool_and row_to_json jsonb_array_length json_array_length jsonb_each json_each
    jsonb_object_keys json_object_keys jsonb_strip_nulls json_strip_nulls
    """
)
# Known to act, named so the reason can say why; destructive where they destroy.
EFFECT_FUNCTIONS = {
    "pg_terminate_backend": True,
    "pg_cancel_backend": False,
    "lo_export": True,
    "lo_import": False,
    "lo_unlink": True,
    "lo_create": False,
    "lo_from_bytea": False,
    "lo_put": True,
    "dblink_exec": True,
    "dblink": False,
    "nextval": False,
    "setval": False,
    "set_config": False,
    "pg_advisory_lock": False,
    "pg_advisory_xact_lock": False,
    "pg_reload_conf": False,
    "pg_rotate_logfile": False,
    "pg_switch_wal": False,
    "pg_drop_replication_slot": True,
    "pg_create_restore_point": False,
    "pg_file_write": True,
    "pg_notify": False,
    "pg_sleep": False,
}
# Built-in operators, cast target types and sampling methods; any other may be user-defined
# and run a function (an operator or a cast is a function call under another name).
BUILT_IN_OPERATORS = _words(
    """
    = <> != < > <= >= + - * / % ^ || ~~ !~~ ~~* !~~* ~ ~* !~ !~* @> <@ && -> ->> #> #>> ? ?| ?&
    @@ @? #- |/ ||/ @ & | # << >> <-> BETWEEN NOT_BETWEEN BETWEEN_SYMMETRIC NOT_BETWEEN_SYMMETRIC
    """
)
BUILT_IN_TYPES = _words(
    """
    int2 int4 int8 smallint integer int bigint float4 float8 real numeric decimal text varchar
    bpchar char character name bool boolean date time timetz timestamp timestamptz interval json
    jsonb uuid bytea inet cidr macaddr money oid xml tsvector tsquery bit varbit regclass
    regtype point
    """
)
BUILT_IN_SAMPLING = _words("system bernoulli")
_READ_STATEMENTS = frozenset({"SelectStmt", "ExplainStmt", "VariableShowStmt"})
_WRITE_NODES = {
    "InsertStmt": (StoredText(gettext_noop("inserts rows")), False),
    "UpdateStmt": (StoredText(gettext_noop("updates rows")), False),
    "DeleteStmt": (StoredText(gettext_noop("deletes rows")), True),
    "MergeStmt": (StoredText(gettext_noop("merges rows")), False),
    "intoClause": (
        StoredText(gettext_noop("creates a table from the result (SELECT ... INTO)")),
        False,
    ),
    "lockingClause": (StoredText(gettext_noop("locks rows (FOR UPDATE / FOR SHARE)")), False),
}
_DESTRUCTIVE_STATEMENTS = frozenset(
    {"DropStmt", "TruncateStmt", "DropdbStmt", "DropRoleStmt", "DropOwnedStmt", "DeleteStmt"}
)

_SQL = StoredText(gettext_noop("SQL: %(reason)s"), texts=("reason",))
_READ_ONLY = StoredText(gettext_noop("one read-only %(kind)s statement."))
_OPERATOR = StoredText(gettext_noop("an operator"))
_ORDER_BY_OPERATOR = StoredText(gettext_noop("an ORDER BY ... USING operator"))
_CAST = StoredText(gettext_noop("a cast to a type"))
_SAMPLING = StoredText(gettext_noop("a TABLESAMPLE method"))
_MYSQL_CODE = StoredText(gettext_noop("a /*! ... */ comment is code on MySQL"))
_MYSQL_BACKSLASH = StoredText(gettext_noop("a backslash escapes a quote on MySQL"))
_NESTED_COMMENT = StoredText(gettext_noop("a nested comment ends early on MySQL and SQLite"))
_COPY_PROGRAM = StoredText(gettext_noop("COPY ... PROGRAM runs a program on the server."))
_COPY = StoredText(gettext_noop("COPY reads or writes files and tables on the server."))
_TRANSACTION = StoredText(gettext_noop("transaction control can end the read-only transaction."))
_EXPLAIN_ANALYZE = StoredText(gettext_noop("EXPLAIN ANALYZE executes the statement."))
_NOT_READ_ONLY = StoredText(gettext_noop("%(kind)s is not a read-only statement."))
_EMPTY = StoredText(gettext_noop("an empty statement is not understood."))
_TOO_LONG = StoredText(gettext_noop("longer than %(limit)s characters."))
_DIALECT = StoredText(
    gettext_noop("%(dialect)s, so it may hide a second statement."), texts=("dialect",)
)
_NOT_PARSED = StoredText(gettext_noop("not understood by PostgreSQL's parser (%(error)s)."))
_STACKED = StoredText(
    gettext_noop(
        "%(count)s statements: stacked statements can leave a read-only transaction and write."
    )
)
_USER_DEFINED = StoredText(
    gettext_noop("%(what)s that may be user-defined runs a function."), texts=("what",)
)
_WRITES = StoredText(gettext_noop("the statement %(what)s."), texts=("what",))
_EFFECT = StoredText(gettext_noop("%(function)s() has side effects."))
_NOT_KNOWN = StoredText(gettext_noop("%(function)s() is not known to be free of side effects."))


def _never(reason: str, rule: str, *, destructive: bool = False) -> Classification:
    return Classification.of(
        Idempotency.NON_IDEMPOTENT,
        reason=_SQL(reason=reason),
        rule=f"sql.{rule}",
        destructive=destructive,
    )


def _walk(node: Any) -> Iterator[tuple[str, Any]]:
    """Every (key, value) pair in the parse tree, depth first."""
    if isinstance(node, dict):
        for key, value in node.items():
            yield key, value
            yield from _walk(value)
    elif isinstance(node, list):
        for item in node:
            yield from _walk(item)


def _built_in(names: list[Any], allowed: frozenset[str]) -> bool:
    """A name (``[schema, name]`` parts) that is one of ``allowed``, bare or in pg_catalog."""
    parts = [part["String"]["sval"] for part in names if "String" in part]
    if parts[:1] == ["pg_catalog"]:
        parts = parts[1:]
    return len(parts) == 1 and parts[0].replace(" ", "_") in allowed


def _user_defined(key: str, value: Any) -> str | None:
    """What a user-defined operator, cast or sampling method in the tree is, if it is one."""
    if key == "A_Expr" and not _built_in(value.get("name", []), BUILT_IN_OPERATORS):
        return _OPERATOR()
    if key == "SortBy" and value.get("useOp") and not _built_in(value["useOp"], BUILT_IN_OPERATORS):
        return _ORDER_BY_OPERATOR()
    if key == "TypeCast" and not _built_in(value["typeName"].get("names", []), BUILT_IN_TYPES):
        return _CAST()
    if key == "RangeTableSample" and not _built_in(value.get("method", []), BUILT_IN_SAMPLING):
        return _SAMPLING()
    return None


def _nested_comment(sql: str) -> bool:
    """A block comment that opens another: PostgreSQL nests them, MySQL and SQLite do not."""
    start = sql.find("/*")
    while start != -1:
        end = sql.find("*/", start + 2)
        inner = sql.find("/*", start + 2)
        if inner != -1 and (end == -1 or inner < end):
            return True
        start = -1 if end == -1 else sql.find("/*", end + 2)
    return False


def _other_dialect(sql: str) -> str | None:
    """Text that MySQL or SQLite split differently from PostgreSQL, so one statement here may
    be two there: refused whatever database the tool targets."""
    if "/*!" in sql:
        return _MYSQL_CODE()
    if "\\" in sql:
        return _MYSQL_BACKSLASH()
    if _nested_comment(sql):
        return _NESTED_COMMENT()
    return None


def _function_name(call: dict[str, Any]) -> str:
    parts = [part["String"]["sval"] for part in call.get("funcname", []) if "String" in part]
    return ".".join(parts).lower()


def _explain_executes(explain: dict[str, Any]) -> bool:
    """``EXPLAIN ANALYZE`` runs the statement it explains."""
    for option in explain.get("options", []):
        definition = option.get("DefElem", {})
        if definition.get("defname") == "analyze":
            value = definition.get("arg", {}).get("Boolean", {}).get("boolval", True)
            if value is not False:
                return True
    return False


def _statement_class(kind: str, body: dict[str, Any]) -> Classification | None:
    """The class a statement of this kind has by itself, or None when it only reads."""
    if kind == "CopyStmt":
        if body.get("is_program"):
            return _never(_COPY_PROGRAM(), "copy_program", destructive=True)
        return _never(_COPY(), "copy")
    if kind == "TransactionStmt":
        return _never(_TRANSACTION(), "transaction")
    if kind == "ExplainStmt" and _explain_executes(body):
        return _never(_EXPLAIN_ANALYZE(), "explain_analyze")
    if kind not in _READ_STATEMENTS:
        return _never(
            _NOT_READ_ONLY(kind=kind.removesuffix("Stmt")),
            "statement",
            destructive=kind in _DESTRUCTIVE_STATEMENTS,
        )
    return None


def classify_sql(sql: str) -> Classification:
    """``idempotent``/``auto`` only for one read-only statement with side-effect-free functions."""
    if not sql.strip():
        return _never(_EMPTY(), "not_understood")
    if len(sql) > MAX_SQL_LENGTH:
        return _never(_TOO_LONG(limit=MAX_SQL_LENGTH), "not_understood")
    dialect = _other_dialect(sql)
    if dialect is not None:
        return _never(_DIALECT(dialect=dialect), "dialect")
    try:
        tree = json.loads(parse_sql_json(sql))
    except ParseError as exc:
        return _never(_NOT_PARSED(error=exc), "not_understood")
    statements = tree.get("stmts", [])
    if len(statements) != 1:
        return _never(
            _STACKED(count=len(statements)),
            "stacked",
            destructive=any(
                next(iter(s["stmt"])) in _DESTRUCTIVE_STATEMENTS for s in statements if "stmt" in s
            ),
        )
    kind, body = next(iter(statements[0]["stmt"].items()))
    found = _statement_class(kind, body)
    if found is not None:
        return found
    for key, value in _walk(body):
        defined = _user_defined(key, value) if isinstance(value, dict) else None
        if defined is not None:
            return _never(_USER_DEFINED(what=defined), "user_defined")
        if key in _WRITE_NODES and value:
            what, destructive = _WRITE_NODES[key]
            return _never(_WRITES(what=what()), "writes", destructive=destructive)
        if key == "FuncCall":
            name = _function_name(value)
            bare = name.removeprefix("pg_catalog.")
            if bare in EFFECT_FUNCTIONS:
                return _never(
                    _EFFECT(function=bare),
                    "function_effect",
                    destructive=EFFECT_FUNCTIONS[bare],
                )
            if bare not in READ_ONLY_FUNCTIONS:
                return _never(_NOT_KNOWN(function=name), "function_unknown")
    return Classification.of(
        Idempotency.IDEMPOTENT,
        reason=_SQL(reason=_READ_ONLY(kind=kind.removesuffix("Stmt").upper())),
        rule="sql.read_only",
    )
