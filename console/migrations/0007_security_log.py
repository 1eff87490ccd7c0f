"""The installation's security log (``SecurityEvent``), append-only at the database level as
the audit is (ledger migration 0002: a trigger rejects every UPDATE and DELETE, TRUNCATE is
left to privileges), and the log each denial window counts for (``DenialWindow.log``)."""

import django.db.models.deletion
from django.db import migrations, models

APPEND_ONLY = """
CREATE OR REPLACE FUNCTION console_security_append_only() RETURNS trigger AS $$
BEGIN
    RAISE EXCEPTION 'console_securityevent is append-only: % is not allowed', TG_OP
        USING ERRCODE = 'insufficient_privilege';
END;
$$ LANGUAGE plpgsql;
CREATE TRIGGER console_security_no_update BEFORE UPDATE OR DELETE ON console_securityevent
    FOR EACH ROW EXECUTE FUNCTION console_security_append_only();
"""
REVERSE = """
DROP TRIGGER IF EXISTS console_security_no_update ON console_securityevent;
DROP FUNCTION IF EXISTS console_security_append_only();
"""


class Migration(migrations.Migration):
    dependencies = [
        ("console", "0006_membership_moves_to_the_ledger"),
    ]

    operations = [
        migrations.CreateModel(
            name="SecurityEvent",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("actor", models.CharField(max_length=200)),
                ("action", models.CharField(max_length=100)),
                ("reason", models.CharField(blank=True, max_length=32)),
                ("target_type", models.CharField(max_length=50)),
                ("target_id", models.CharField(max_length=100)),
                (
                    "source",
                    models.CharField(
                        choices=[
                            ("api", "Api"),
                            ("console", "Console"),
                            ("worker", "Worker"),
                            ("system", "System"),
                            ("cli", "Cli"),
                            ("admin", "Admin"),
                        ],
                        max_length=16,
                    ),
                ),
                ("facts", models.JSONField(blank=True, default=dict)),
                ("detail", models.TextField(blank=True)),
                ("created_at", models.DateTimeField(auto_now_add=True)),
            ],
        ),
        migrations.RemoveConstraint(
            model_name="denialwindow",
            name="denialwindow_unique",
        ),
        migrations.AddField(
            model_name="denialwindow",
            name="log",
            field=models.CharField(
                choices=[("audit", "Audit"), ("security", "Security")],
                default="audit",
                max_length=16,
            ),
        ),
        migrations.AddConstraint(
            model_name="denialwindow",
            constraint=models.UniqueConstraint(
                fields=("key", "log", "window_start"), name="denialwindow_unique"
            ),
        ),
        migrations.AddField(
            model_name="securityevent",
            name="tenant",
            field=models.ForeignKey(
                blank=True,
                null=True,
                on_delete=django.db.models.deletion.PROTECT,
                related_name="+",
                to="ledger.tenant",
            ),
        ),
        migrations.AddIndex(
            model_name="securityevent",
            index=models.Index(fields=["created_at"], name="securityevent_time_idx"),
        ),
        migrations.AddIndex(
            model_name="securityevent",
            index=models.Index(fields=["actor", "created_at"], name="securityevent_actor_idx"),
        ),
        migrations.RunSQL(APPEND_ONLY, REVERSE),
    ]
