#!/bin/sh
# The stand-in's entrypoint: what the official image's does for compose.yaml. On an empty data
# directory: initdb with the superuser's password (SCRAM over TCP), the database POSTGRES_DB,
# the scripts in /docker-entrypoint-initdb.d run against a server on the Unix socket only (so
# nothing connects over TCP before they are done); then the server, on every address.
set -eu
export POSTGRES_USER=postgres POSTGRES_DB="${POSTGRES_DB:-postgres}"
if [ ! -s "$PGDATA/PG_VERSION" ]; then
    pwfile=$(mktemp)
    printf '%s' "$POSTGRES_PASSWORD" > "$pwfile"
    initdb --username=postgres --pwfile="$pwfile" --auth-local=trust \
        --auth-host=scram-sha-256 -D "$PGDATA" > /dev/null
    rm -f "$pwfile"
    echo "host all all all scram-sha-256" >> "$PGDATA/pg_hba.conf"
    pg_ctl -D "$PGDATA" -o "-c listen_addresses=''" -w start > /dev/null
    if [ "$POSTGRES_DB" != postgres ]; then
        psql -v ON_ERROR_STOP=1 -U postgres -d postgres -c "CREATE DATABASE \"$POSTGRES_DB\""
    fi
    for script in /docker-entrypoint-initdb.d/*; do
        case "$script" in
            *.sh) if [ -x "$script" ]; then "$script"; else . "$script"; fi ;;
            *.sql) psql -v ON_ERROR_STOP=1 -U postgres -d "$POSTGRES_DB" -f "$script" ;;
        esac
    done
    pg_ctl -D "$PGDATA" -m fast -w stop > /dev/null
fi
exec postgres -D "$PGDATA" -c listen_addresses='*'
