#!/bin/sh
# The one user PgBouncer lets in, with the password it also logs in to PostgreSQL with (SCRAM
# needs it in clear here), written from the environment so that no file holds it.
set -eu
umask 077
printf '"ledger" "%s"\n' "$LEDGER_DB_PASSWORD" > /etc/pgbouncer/userlist.txt
exec "$@"
