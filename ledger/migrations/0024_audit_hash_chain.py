"""Seal the audit log into a hash chain per tenant (ledger/audit_chain.py).

Three nullable columns (no table rewrite): an event's place in its tenant's chain and the two
digests, filled in after the insert by the sealer (``ledger.services.audit_sealing``). The
append-only trigger of migration 0002 is replaced: it still refuses every UPDATE and DELETE,
but for the sealer's own update, which fills the seal of an unsealed row and changes nothing
else. Rows are inserted unsealed, so the seal is written only through that update. Events
already in the table are unsealed and are sealed, oldest first, by the sealer's first runs.
"""

from django.db import migrations, models

# The row's other columns are compared as a whole (its JSON image without the seal), so a
# column added later is covered without changing this function.
POSTGRES_UP = """
CREATE OR REPLACE FUNCTION ledger_audit_append_only() RETURNS trigger AS $$
BEGIN
    IF TG_OP = 'UPDATE'
        AND OLD.seq IS NULL AND OLD.prev_digest IS NULL AND OLD.digest IS NULL
        AND NEW.seq IS NOT NULL AND NEW.prev_digest IS NOT NULL AND NEW.digest IS NOT NULL
        AND to_jsonb(NEW) - '{seq,prev_digest,digest}'::text[]
            = to_jsonb(OLD) - '{seq,prev_digest,digest}'::text[]
    THEN
        RETURN NEW;
    END IF;
    RAISE EXCEPTION 'ledger_auditevent is append-only: % is not allowed', TG_OP
        USING ERRCODE = 'insufficient_privilege',
              HINT = 'Only the seal of an unsealed event may be written, and nothing else with it.';
END;
$$ LANGUAGE plpgsql;
CREATE OR REPLACE FUNCTION ledger_audit_inserted_unsealed() RETURNS trigger AS $$
BEGIN
    RAISE EXCEPTION 'ledger_auditevent: an event is inserted unsealed, and sealed afterwards'
        USING ERRCODE = 'insufficient_privilege';
END;
$$ LANGUAGE plpgsql;
CREATE TRIGGER ledger_audit_insert_unsealed BEFORE INSERT ON ledger_auditevent
    FOR EACH ROW
    WHEN (NEW.seq IS NOT NULL OR NEW.prev_digest IS NOT NULL OR NEW.digest IS NOT NULL)
    EXECUTE FUNCTION ledger_audit_inserted_unsealed();
"""
POSTGRES_DOWN = """
DROP TRIGGER IF EXISTS ledger_audit_insert_unsealed ON ledger_auditevent;
DROP FUNCTION IF EXISTS ledger_audit_inserted_unsealed();
CREATE OR REPLACE FUNCTION ledger_audit_append_only() RETURNS trigger AS $$
BEGIN
    RAISE EXCEPTION 'ledger_auditevent is append-only: % is not allowed', TG_OP
        USING ERRCODE = 'insufficient_privilege';
END;
$$ LANGUAGE plpgsql;
"""


class Migration(migrations.Migration):
    dependencies = [
        ("ledger", "0023_approval_principals"),
    ]

    operations = [
        migrations.AddField(
            model_name="auditevent",
            name="digest",
            field=models.CharField(blank=True, editable=False, max_length=64, null=True),
        ),
        migrations.AddField(
            model_name="auditevent",
            name="prev_digest",
            field=models.CharField(blank=True, editable=False, max_length=64, null=True),
        ),
        migrations.AddField(
            model_name="auditevent",
            name="seq",
            field=models.BigIntegerField(blank=True, editable=False, null=True),
        ),
        migrations.AddIndex(
            model_name="auditevent",
            index=models.Index(
                condition=models.Q(("seq__isnull", True)),
                fields=["tenant", "id"],
                name="audit_unsealed_idx",
            ),
        ),
        migrations.AddConstraint(
            model_name="auditevent",
            constraint=models.UniqueConstraint(
                condition=models.Q(("seq__isnull", False)),
                fields=("tenant", "seq"),
                name="audit_chain_seq_unique",
                nulls_distinct=False,
            ),
        ),
        migrations.AddConstraint(
            model_name="auditevent",
            constraint=models.CheckConstraint(
                condition=models.Q(
                    models.Q(
                        ("digest__isnull", True),
                        ("prev_digest__isnull", True),
                        ("seq__isnull", True),
                    ),
                    models.Q(
                        ("digest__regex", "^[0-9a-f]{64}$"),
                        ("prev_digest__regex", "^[0-9a-f]{64}$"),
                        ("seq__gte", 1),
                    ),
                    _connector="OR",
                ),
                name="audit_seal_whole",
            ),
        ),
        migrations.RunSQL(POSTGRES_UP, POSTGRES_DOWN),
    ]
