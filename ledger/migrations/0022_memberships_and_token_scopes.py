from django.conf import settings
from django.db import migrations, models
import django.contrib.postgres.fields
import django.db.models.deletion

ROLES = [
    ("operator", "Operator"),
    ("approver", "Approver"),
    ("manager", "Manager"),
    ("admin", "Admin"),
]
SCOPES = [
    ("calls", "record, start, complete and replay calls"),
    ("runs", "start, read and finish runs"),
    ("tools", "register and import tools"),
    ("combinations", "read version combinations"),
    ("lifecycle", "change version combinations, thresholds and rollouts"),
    ("policies", "set approval policies"),
    ("approvals:read", "read approvals"),
    ("approvals:decide", "decide approvals"),
    ("compensations", "request compensations"),
]


def scope_existing_tokens(apps, schema_editor):
    """Tokens issued before scopes keep what they could do: a person's follows their role, a
    service account's every scope but deciding approvals (which it never could)."""
    ApiToken = apps.get_model("ledger", "ApiToken")
    ServiceAccount = apps.get_model("ledger", "ServiceAccount")
    accounts = set(ServiceAccount.objects.values_list("user_id", flat=True))
    every = [name for name, _label in SCOPES]
    for token in ApiToken.objects.all():
        if token.user_id in accounts:
            token.scopes = [name for name in every if name != "approvals:decide"]
        else:
            token.scopes = every
        token.save(update_fields=["scopes"])


class Migration(migrations.Migration):
    """Memberships move from the console to the ledger (the API's tokens act through them);
    the table keeps its rows and is renamed. Tokens get scopes."""

    dependencies = [
        ("ledger", "0021_entry_observation"),
        ("console", "0005_denial_windows"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.CreateModel(
                    name="Membership",
                    fields=[
                        (
                            "id",
                            models.BigAutoField(
                                auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                            ),
                        ),
                        ("role", models.CharField(blank=True, choices=ROLES, max_length=16)),
                        ("created_at", models.DateTimeField(auto_now_add=True)),
                        (
                            "tenant",
                            models.ForeignKey(
                                on_delete=django.db.models.deletion.CASCADE,
                                related_name="members",
                                to="ledger.tenant",
                            ),
                        ),
                        (
                            "user",
                            models.ForeignKey(
                                on_delete=django.db.models.deletion.CASCADE,
                                related_name="memberships",
                                to=settings.AUTH_USER_MODEL,
                            ),
                        ),
                    ],
                    options={
                        "db_table": "console_membership",
                        "constraints": [
                            models.UniqueConstraint(
                                fields=("user", "tenant"), name="membership_unique"
                            ),
                            models.CheckConstraint(
                                condition=models.Q(
                                    ("role__in", ["", "operator", "approver", "manager", "admin"])
                                ),
                                name="membership_role",
                            ),
                        ],
                    },
                ),
            ],
            database_operations=[],
        ),
        migrations.AlterModelTable(name="membership", table=None),
        migrations.AddField(
            model_name="apitoken",
            name="revoked_by",
            field=models.CharField(blank=True, max_length=200),
        ),
        migrations.AddField(
            model_name="apitoken",
            name="scopes",
            field=django.contrib.postgres.fields.ArrayField(
                base_field=models.CharField(choices=SCOPES, max_length=32), default=list, size=None
            ),
        ),
        migrations.RunPython(scope_existing_tokens, migrations.RunPython.noop),
        migrations.AddConstraint(
            model_name="apitoken",
            constraint=models.CheckConstraint(
                condition=models.Q(("scopes__contained_by", [name for name, _label in SCOPES])),
                name="apitoken_known_scopes",
            ),
        ),
    ]
