"""Make the audit table append-only at the database level.

A trigger rejects every UPDATE and DELETE on ``ledger_auditevent``, whoever issues it (the ORM,
raw SQL, the admin, a psql session), so the audit trail cannot be rewritten after the fact.
TRUNCATE is left to privileges: only the table's owner may truncate, and the production role
that serves requests should not own the schema (see docs/deploy.md). Test databases rely on
TRUNCATE to reset between transactional tests.
"""

from django.db import migrations

POSTGRES_UP = """
CREATE OR REPLACE FUNCTION ledger_audit_append_only() RETURNS trigger AS $$
BEGIN
    RAISE EXCEPTION 'ledger_auditevent is append-only: % is not allowed', TG_OP
        USING ERRCODE = 'insufficient_privilege';
END;
$$ LANGUAGE plpgsql;
CREATE TRIGGER ledger_audit_no_update BEFORE UPDATE OR DELETE ON ledger_auditevent
    FOR EACH ROW EXECUTE FUNCTION ledger_audit_append_only();
"""
POSTGRES_DOWN = """
DROP TRIGGER IF EXISTS ledger_audit_no_update ON ledger_auditevent;
DROP FUNCTION IF EXISTS ledger_audit_append_only();
"""


class Migration(migrations.Migration):
    dependencies = [("ledger", "0001_initial")]

    operations = [migrations.RunSQL(POSTGRES_UP, POSTGRES_DOWN)]
