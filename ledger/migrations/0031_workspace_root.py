"""The workspace roots move from the reconcile app into the ledger: the classifier is handed
them. The table keeps its rows; it is renamed, and the reconcile app forgets the model
(reconcile 0004)."""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("ledger", "0030_plural_names"),
        ("reconcile", "0003_compensation_adapter"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[
                migrations.RunSQL(
                    "ALTER TABLE reconcile_workspaceroot RENAME TO ledger_workspaceroot",
                    reverse_sql="ALTER TABLE ledger_workspaceroot RENAME TO reconcile_workspaceroot",
                ),
            ],
            state_operations=[
                migrations.CreateModel(
                    name="WorkspaceRoot",
                    fields=[
                        (
                            "id",
                            models.BigAutoField(
                                auto_created=True,
                                primary_key=True,
                                serialize=False,
                                verbose_name="ID",
                            ),
                        ),
                        (
                            "name",
                            models.CharField(
                                help_text="The write plan's ``workspace``.", max_length=200
                            ),
                        ),
                        (
                            "path",
                            models.CharField(
                                help_text="Absolute path on the worker machines.", max_length=1024
                            ),
                        ),
                        ("created_at", models.DateTimeField(auto_now_add=True)),
                        (
                            "tenant",
                            models.ForeignKey(
                                on_delete=django.db.models.deletion.CASCADE,
                                related_name="workspaces",
                                to="ledger.tenant",
                            ),
                        ),
                    ],
                    options={
                        "constraints": [
                            models.UniqueConstraint(
                                fields=("tenant", "name"), name="workspace_unique_name"
                            ),
                            models.CheckConstraint(
                                condition=models.Q(("path__startswith", "/")),
                                name="workspace_path_absolute",
                            ),
                        ],
                    },
                ),
            ],
        ),
    ]
