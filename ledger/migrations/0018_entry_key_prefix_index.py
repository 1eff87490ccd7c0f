from django.db import migrations, models


class Migration(migrations.Migration):
    # A key searched by its start (the console's key filter, a text beginning "agent:") reads a
    # B-tree range instead of the trigram index, whose trigrams of "agent:" are in every key.
    # The (tenant, key) index takes the pattern operator class, which LIKE 'prefix%' uses in any
    # collation and equality still uses; it needs no extension, so the embedded server has it.

    dependencies = [
        ("ledger", "0017_escalation_kind_contradicted_settlement"),
    ]

    operations = [
        migrations.RemoveIndex(
            model_name="ledgerentry",
            name="entry_key_idx",
        ),
        migrations.AddIndex(
            model_name="ledgerentry",
            index=models.Index(
                fields=["tenant", "idempotency_key"],
                name="entry_key_prefix_idx",
                opclasses=["int8_ops", "varchar_pattern_ops"],
            ),
        ),
    ]
