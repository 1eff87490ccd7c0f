import django.contrib.postgres.fields
from django.db import migrations, models


def requesters_are_principals(apps, schema_editor):
    ApprovalRequest = apps.get_model("ledger", "ApprovalRequest")
    for approval in ApprovalRequest.objects.exclude(requested_by_user=None):
        approval.principal_ids = [approval.requested_by_user_id]
        approval.save(update_fields=["principal_ids"])


class Migration(migrations.Migration):
    dependencies = [("ledger", "0022_memberships_and_token_scopes")]

    operations = [
        migrations.AddField(
            model_name="approvalrequest",
            name="principal_ids",
            field=django.contrib.postgres.fields.ArrayField(
                base_field=models.BigIntegerField(), blank=True, default=list, size=None
            ),
        ),
        migrations.RunPython(requesters_are_principals, migrations.RunPython.noop),
    ]
