from django.db import migrations


class Migration(migrations.Migration):
    """The console's memberships are the ledger's now (its table moved with them)."""

    dependencies = [
        ("console", "0005_denial_windows"),
        ("ledger", "0022_memberships_and_token_scopes"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[migrations.DeleteModel(name="Membership")],
            database_operations=[],
        ),
    ]
