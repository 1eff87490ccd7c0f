from django.db import migrations, models

# From least to most restricted, as ``ledger.domain.DataClassification`` declares them.
CLASSIFICATIONS = ["public", "internal", "confidential", "restricted"]


def classify_earlier_records(apps, schema_editor):
    """A record reserved before records had a classification takes the strictest one its
    calls declared, so whatever is stored for it by this rule (a look-up's evidence, a human's
    resolution) is never redacted less than any of its callers asked for."""
    record = apps.get_model("ledger", "IdempotencyRecord")._meta.db_table
    entry = apps.get_model("ledger", "LedgerEntry")._meta.db_table
    schema_editor.execute(
        f"UPDATE {schema_editor.quote_name(record)} r SET data_classification = s.strictest "  # noqa: S608 - table names from the models
        "FROM (SELECT record_id, (%s::varchar[])[MAX(array_position(%s::varchar[], "
        f"data_classification))] AS strictest FROM {schema_editor.quote_name(entry)} "
        "WHERE record_id IS NOT NULL GROUP BY record_id) s "
        "WHERE r.id = s.record_id AND s.strictest IS NOT NULL "
        "AND r.data_classification <> s.strictest",
        [CLASSIFICATIONS, CLASSIFICATIONS],
    )


class Migration(migrations.Migration):
    # What is stored of an action's result, error and evidence is redacted by the action's
    # data classification whoever finds its outcome (a report, a look-up, a file check, a
    # human): the record carries it, set by the call that reserves the key.

    dependencies = [
        ("ledger", "0018_entry_key_prefix_index"),
    ]

    operations = [
        migrations.AddField(
            model_name="idempotencyrecord",
            name="data_classification",
            field=models.CharField(
                choices=[
                    ("public", "public"),
                    ("internal", "internal"),
                    ("confidential", "confidential"),
                    ("restricted", "restricted"),
                ],
                db_default="internal",
                default="internal",
                max_length=16,
            ),
        ),
        migrations.RunPython(classify_earlier_records, migrations.RunPython.noop),
        migrations.AddConstraint(
            model_name="idempotencyrecord",
            constraint=models.CheckConstraint(
                condition=models.Q(
                    ("data_classification__in", ["public", "internal", "confidential", "restricted"])
                ),
                name="record_data_classification_valid",
            ),
        ),
    ]
