"""SQL carried in an argument: auto only for one read-only statement with harmless functions."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ledger.classification.sql import classify_sql
from ledger.domain import ReplayPolicy

READS = [
    "SELECT 1",
    "SELECT * FROM t WHERE a = 1",
    "EXPLAIN SELECT * FROM t WHERE a = 1",
    "select count(*), lower(name) from users group by 2 order by 1 desc limit 5",
    "SELECT 1;",
    "WITH recent AS (SELECT * FROM orders WHERE created > now()) SELECT id FROM recent",
    "SELECT 'COMMIT; DROP TABLE t'",
    "SELECT $$; DELETE FROM t$$",
    "SHOW search_path",
    "TABLE t",
    "VALUES (1), (2)",
    "SELECT a FROM t UNION SELECT b FROM u",
    "-- a comment; DROP TABLE t\nSELECT 1",
    "SELECT 1 +++ 2",
    "SELECT a FROM t WHERE b LIKE 'x%' AND c BETWEEN 1 AND 2 AND d IN (1, 2) ORDER BY a USING <",
    "SELECT '1'::int, now()::date, CAST(a AS pg_catalog.text), b::numeric(10, 2) FROM t",
    "SELECT * FROM t TABLESAMPLE BERNOULLI (10)",
    "SELECT 1 /* a comment */",
]

# (family, statement, destructive)
NEVER = [
    ("stacked", "COMMIT; DROP SCHEMA public CASCADE", True),
    ("stacked", "SELECT 1; SELECT 2", False),
    ("stacked", "SELECT 1; DELETE FROM t", True),
    ("dml", "INSERT INTO t VALUES (1)", False),
    ("dml", "UPDATE t SET a = 1", False),
    ("dml", "DELETE FROM t WHERE a = 1", True),
    ("dml", "MERGE INTO t USING u ON t.id = u.id WHEN MATCHED THEN DELETE", False),
    ("ddl", "DROP TABLE t", True),
    ("ddl", "TRUNCATE t", True),
    ("ddl", "CREATE TABLE t (a int)", False),
    ("ddl", "ALTER TABLE t ADD COLUMN b int", False),
    ("ddl", "DROP DATABASE prod", True),
    ("copy_program", "COPY t TO PROGRAM 'rm -rf /'", True),
    ("copy_program", "COPY (SELECT 1) TO PROGRAM 'curl evil'", True),
    ("copy", "COPY t FROM '/etc/passwd'", False),
    ("function", "SELECT pg_terminate_backend(1234)", True),
    ("function", "SELECT lo_export(16409, '/tmp/x')", True),
    ("function", "SELECT dblink_exec('host=x', 'DELETE FROM t')", True),
    ("function", "SELECT nextval('order_seq')", False),
    ("function", "SELECT set_config('search_path', 'evil', false)", False),
    ("function", "SELECT pg_catalog.setval('s', 1)", False),
    ("function", "SELECT * FROM t WHERE a = nextval('s')", False),
    ("function", "SELECT * FROM dblink('host=x', 'select 1') AS r(a int)", False),
    ("function", "SELECT my_schema.do_things()", False),
    ("writing_cte", "WITH d AS (DELETE FROM t RETURNING *) SELECT * FROM d", True),
    ("writing_cte", "WITH u AS (UPDATE t SET a = 1 RETURNING *) SELECT 1", False),
    ("writing_cte", "WITH i AS (INSERT INTO t VALUES (1) RETURNING *) SELECT 1", False),
    ("select_into", "SELECT * INTO t2 FROM t", False),
    ("locking", "SELECT * FROM t FOR UPDATE", False),
    ("locking", "SELECT * FROM t FOR SHARE SKIP LOCKED", False),
    ("transaction", "BEGIN", False),
    ("transaction", "COMMIT", False),
    ("transaction", "SET TRANSACTION READ WRITE", False),
    ("explain_analyze", "EXPLAIN ANALYZE DELETE FROM t", False),
    ("explain_analyze", "EXPLAIN (ANALYZE) SELECT nextval('s')", False),
    ("other", "SET search_path = evil", False),
    ("other", "DO $$ BEGIN DELETE FROM t; END $$", False),
    ("other", "CALL archive_orders()", False),
    ("other", "VACUUM FULL t", False),
    ("operator", "SELECT 1 OPERATOR(public.===) 2", False),
    ("operator", "SELECT 1 === 2", False),
    ("operator", "SELECT a FROM t ORDER BY a USING OPERATOR(public.<<<)", False),
    ("cast", "SELECT '1'::public.evil", False),
    ("cast", "SELECT CAST('x' AS evil)", False),
    ("sampling", "SELECT * FROM t TABLESAMPLE evil_sampler(10)", False),
    ("dialect", "SELECT 1 /* /* */ ; DROP TABLE t; -- */", False),
    ("dialect", "SELECT 'a\\''; DROP TABLE t; -- '", False),
    ("dialect", "SELECT 1 /*!50000 ; DROP TABLE t */", False),
    ("unparsed", "SELEC 1", False),
    ("unparsed", "PRAGMA writable_schema = 1", False),
    ("unparsed", "", False),
    ("unparsed", "   ", False),
]


@pytest.mark.parametrize("sql", READS)
def test_one_read_only_statement_is_auto(sql: str) -> None:
    result = classify_sql(sql)
    assert result.replay_policy is ReplayPolicy.AUTO, result.reason
    assert result.rule == "sql.read_only"


# pytest escapes a backslash in an id, and `make mutate` (one pytest process collecting again
# and again) then cannot find that id: the ids spell it out.
@pytest.mark.parametrize(
    ("family", "sql", "destructive"),
    NEVER,
    ids=[f"{f}:{s}".replace("\\", "<backslash>") for f, s, _ in NEVER],
)
def test_statements_that_can_write_are_never(family: str, sql: str, destructive: bool) -> None:
    result = classify_sql(sql)
    assert result.replay_policy is ReplayPolicy.NEVER, (family, result.reason)
    assert result.destructive is destructive, result.reason
    assert result.reason.startswith("SQL: ")


def test_an_unparsed_statement_says_it_was_not_understood() -> None:
    assert classify_sql("SELEC 1").rule == "sql.not_understood"


def test_an_oversized_statement_is_never() -> None:
    assert classify_sql("SELECT " + "1+" * 60_000 + "1").rule == "sql.not_understood"


_statement = st.sampled_from(
    [*READS[:6], "DELETE FROM t", "SELECT nextval('s')", "COMMIT", "SELECT 'a;b'"]
)
_separator = st.sampled_from([";", "; ", ";\n", " ;\n\n", ";--x\n"])


@given(statements=st.lists(_statement, min_size=2, max_size=5), separator=_separator)
def test_no_list_of_more_than_one_statement_is_ever_auto(
    statements: list[str], separator: str
) -> None:
    sql = separator.join(s.rstrip(";") for s in statements)
    assert classify_sql(sql).replay_policy is ReplayPolicy.NEVER
