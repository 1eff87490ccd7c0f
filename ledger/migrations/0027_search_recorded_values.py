from django.db import migrations

#: Every string at any depth of a JSON column (``ledger.models.json_strings.JsonStrings``, the
#: expression the console's search asks with: the planner uses an index only for its exact
#: expression, and a test EXPLAINs each search).
STRINGS = (
    "jsonb_path_query_array(COALESCE({column}, 'null'::jsonb), "
    "'strict $.** ? (@.type() == \"string\")'::jsonpath)"
)


class Migration(migrations.Migration):
    # The console's search for an id inside what an action recorded (a downstream's order id in
    # its result, a code in its error) or a call's report gave as evidence: the strings of
    # those JSON values, in GIN indexes with jsonb_path_ops (one hash per string, so the names
    # of an object's fields are not in them; docs/performance.md), each of only the rows that
    # hold such a value. In SQL, outside Django's model state: Django writes an operator class
    # on an expression only with django.contrib.postgres installed. Built concurrently: the
    # records and the entries are written by every tool call, which a plain CREATE INDEX
    # would hold up while it reads them all.

    atomic = False

    dependencies = [
        ("ledger", "0026_mcp_server_implementation"),
    ]

    operations = [
        migrations.RunSQL(
            'CREATE INDEX CONCURRENTLY IF NOT EXISTS "record_values_idx" '
            'ON "ledger_idempotencyrecord" USING gin (('
            + STRINGS.format(column='"result"')
            + " || "
            + STRINGS.format(column='"error"')
            + ') jsonb_path_ops) WHERE ("result" IS NOT NULL OR "error" IS NOT NULL)',
            reverse_sql='DROP INDEX CONCURRENTLY IF EXISTS "record_values_idx"',
        ),
        migrations.RunSQL(
            'CREATE INDEX CONCURRENTLY IF NOT EXISTS "entry_evidence_values_idx" '
            'ON "ledger_ledgerentry" USING gin (('
            + STRINGS.format(column='"side_effects"')
            + ") jsonb_path_ops) WHERE \"side_effects\" <> '[]'::jsonb",
            reverse_sql='DROP INDEX CONCURRENTLY IF EXISTS "entry_evidence_values_idx"',
        ),
    ]
