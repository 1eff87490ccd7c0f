from django.db import migrations, models


class Migration(migrations.Migration):
    # make bench (docs/performance.md): the console's list of calls pages newest first on
    # (created_at, id), so a time window reads its rows from this index in order; the index
    # on (tenant, created_at) it replaces served only a prefix of it. The wider index is built
    # before the old one is dropped.

    dependencies = [
        ("ledger", "0015_escalation_kind"),
    ]

    operations = [
        migrations.AddIndex(
            model_name="ledgerentry",
            index=models.Index(
                fields=["tenant", "created_at", "id"], name="entry_tenant_time_id_idx"
            ),
        ),
        migrations.RemoveIndex(
            model_name="ledgerentry",
            name="entry_tenant_time_idx",
        ),
    ]
