"""The workspace roots are the ledger's (ledger 0031 renamed the table and took the model):
this app forgets the model, and the admin's permissions follow it."""

from django.db import migrations


def content_type_to_ledger(apps, schema_editor):
    content_type = apps.get_model("contenttypes", "ContentType")
    if not content_type.objects.filter(app_label="ledger", model="workspaceroot").exists():
        content_type.objects.filter(app_label="reconcile", model="workspaceroot").update(
            app_label="ledger"
        )


def content_type_to_reconcile(apps, schema_editor):
    content_type = apps.get_model("contenttypes", "ContentType")
    if not content_type.objects.filter(app_label="reconcile", model="workspaceroot").exists():
        content_type.objects.filter(app_label="ledger", model="workspaceroot").update(
            app_label="reconcile"
        )


class Migration(migrations.Migration):
    dependencies = [
        ("contenttypes", "0002_remove_content_type_name"),
        ("ledger", "0031_workspace_root"),
        ("reconcile", "0003_compensation_adapter"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[],
            state_operations=[migrations.DeleteModel(name="WorkspaceRoot")],
        ),
        migrations.RunPython(content_type_to_ledger, content_type_to_reconcile),
    ]
