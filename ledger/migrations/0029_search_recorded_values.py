from django.db import migrations

#: Every string at any depth of a JSON value, as ``<tenant>:<string>`` (a text array; none
#: for SQL NULL): ``ledger.models.json_strings.JsonStrings`` calls it, and the indexes below
#: are of its very expressions, the only ones the planner matches them with.
FUNCTION = """
CREATE OR REPLACE FUNCTION ledger_json_strings(tenant bigint, value jsonb) RETURNS text[]
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
  SELECT coalesce(array_agg(tenant::text || ':' || (found #>> '{}')), '{}')
  FROM pg_catalog.jsonb_path_query(
    coalesce(value, 'null'), 'strict $.** ? (@.type() == "string")'
  ) AS strings(found)
$$
"""
RECORD_STRINGS = (
    'ledger_json_strings("tenant_id", "result") || ledger_json_strings("tenant_id", "error")'
)
ENTRY_STRINGS = 'ledger_json_strings("tenant_id", "side_effects")'


class Migration(migrations.Migration):
    # The console's search for an id inside what an action recorded (a downstream's order id in
    # its result, a code in its error) or a call's report gave as evidence: the strings of
    # those JSON values, each under its tenant, in GIN indexes of the rows that hold such a
    # value. Partial indexes' statistics are not used for estimates, so a statistics object
    # of each expression gives the planner each string's frequency: a rare one is read from
    # the index, a common one from the tenant's rows, stopping at the first matches
    # (docs/performance.md). In SQL, outside Django's model state, with the function they
    # call. Built concurrently: the records and the entries are written by every tool call,
    # which a plain CREATE INDEX would hold up while it reads them all.

    atomic = False

    dependencies = [
        ("ledger", "0028_compensation_reason"),
    ]

    operations = [
        migrations.RunSQL(
            FUNCTION, reverse_sql="DROP FUNCTION IF EXISTS ledger_json_strings(bigint, jsonb)"
        ),
        migrations.RunSQL(
            'CREATE INDEX CONCURRENTLY IF NOT EXISTS "record_values_idx" '
            f'ON "ledger_idempotencyrecord" USING gin (({RECORD_STRINGS})) '
            'WHERE ("result" IS NOT NULL OR "error" IS NOT NULL)',
            reverse_sql='DROP INDEX CONCURRENTLY IF EXISTS "record_values_idx"',
        ),
        migrations.RunSQL(
            'CREATE STATISTICS IF NOT EXISTS "record_values_stats" '
            f'ON ({RECORD_STRINGS}) FROM "ledger_idempotencyrecord"',
            reverse_sql='DROP STATISTICS IF EXISTS "record_values_stats"',
        ),
        migrations.RunSQL(
            'CREATE INDEX CONCURRENTLY IF NOT EXISTS "entry_evidence_values_idx" '
            f'ON "ledger_ledgerentry" USING gin (({ENTRY_STRINGS})) '
            "WHERE \"side_effects\" <> '[]'::jsonb",
            reverse_sql='DROP INDEX CONCURRENTLY IF EXISTS "entry_evidence_values_idx"',
        ),
        migrations.RunSQL(
            'CREATE STATISTICS IF NOT EXISTS "entry_evidence_values_stats" '
            f'ON ({ENTRY_STRINGS}) FROM "ledger_ledgerentry"',
            reverse_sql='DROP STATISTICS IF EXISTS "entry_evidence_values_stats"',
        ),
    ]
