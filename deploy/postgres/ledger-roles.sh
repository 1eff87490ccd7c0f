#!/bin/sh
# The ledger's two roles, made once when the PostgreSQL image initialises an empty data
# directory (it runs the scripts in /docker-entrypoint-initdb.d; compose.yaml mounts this
# folder there). `ledger_owner` owns the schema and runs the migrations; `ledger` serves
# requests and runs the workers: it reads and writes rows but owns no table, so it cannot
# TRUNCATE the append-only audit table or change the schema (README "Deploy").
set -eu

psql -v ON_ERROR_STOP=1 --username "$POSTGRES_USER" --dbname "$POSTGRES_DB" \
    -v owner_password="$LEDGER_OWNER_PASSWORD" -v ledger_password="$LEDGER_DB_PASSWORD" <<'SQL'
CREATE ROLE ledger_owner LOGIN PASSWORD :'owner_password';
CREATE ROLE ledger LOGIN PASSWORD :'ledger_password';
-- The owner may create the trusted extension pg_trgm (migration ledger 0013).
ALTER DATABASE :"DBNAME" OWNER TO ledger_owner;
ALTER SCHEMA public OWNER TO ledger_owner;
REVOKE ALL ON DATABASE :"DBNAME" FROM PUBLIC;
GRANT CONNECT, TEMPORARY ON DATABASE :"DBNAME" TO ledger;
GRANT USAGE ON SCHEMA public TO ledger;
-- Whatever the migrations create, now and later, the serving role may use row by row.
ALTER DEFAULT PRIVILEGES FOR ROLE ledger_owner IN SCHEMA public
    GRANT SELECT, INSERT, UPDATE, DELETE ON TABLES TO ledger;
ALTER DEFAULT PRIVILEGES FOR ROLE ledger_owner IN SCHEMA public
    GRANT USAGE, SELECT ON SEQUENCES TO ledger;
-- The service's bounded waits on the role too: behind PgBouncer, which refuses them as
-- start-up options, they come from here (DATABASE_TIMEOUTS_AT_CONNECT=false; docs/runbook.md).
-- A direct connection's start-up options override them with the same values.
ALTER ROLE ledger SET lock_timeout = '2s';
ALTER ROLE ledger SET statement_timeout = '15s';
ALTER ROLE ledger SET idle_in_transaction_session_timeout = '30s';
ALTER ROLE ledger SET idle_session_timeout = '120s';
SQL
