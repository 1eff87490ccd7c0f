from django.db import migrations, models


class Migration(migrations.Migration):
    # The console's search: keys by fragment, call and run ids by prefix.
    #
    # A key fragment (LIKE '%cart-42%') uses a trigram index where the server has pg_trgm (a
    # trusted extension the database owner may create); the embedded PostgreSQL of `make run`
    # does not ship it, and there the search reads the rows (a demo's few thousand). Both SQL
    # indexes are outside Django's model state: the trigram one exists only on some servers,
    # and Django cannot write an operator class on a cast (the call id's index is on its text,
    # what startswith on a uuid compares, with the class LIKE 'abc%' uses in any collation).

    dependencies = [
        ("ledger", "0012_compensation"),
    ]

    operations = [
        migrations.RunSQL(
            """
            DO $$
            BEGIN
              IF EXISTS (SELECT 1 FROM pg_available_extensions WHERE name = 'pg_trgm') THEN
                CREATE EXTENSION IF NOT EXISTS pg_trgm;
                CREATE INDEX IF NOT EXISTS "entry_key_trgm_idx" ON "ledger_ledgerentry"
                  USING gin ("idempotency_key" gin_trgm_ops);
              END IF;
            END $$;
            """,
            reverse_sql='DROP INDEX IF EXISTS "entry_key_trgm_idx"',
        ),
        migrations.RunSQL(
            'CREATE INDEX "entry_call_prefix_idx" ON "ledger_ledgerentry" '
            '((("call_id")::text) text_pattern_ops)',
            reverse_sql='DROP INDEX "entry_call_prefix_idx"',
        ),
        migrations.AddIndex(
            model_name="run",
            index=models.Index(
                fields=["run_id"], name="run_id_prefix_idx", opclasses=["varchar_pattern_ops"]
            ),
        ),
    ]
