#!/usr/bin/env bash
# Starts a PostgreSQL server on loopback for autotune's multi-worker studies and their
# tests (Debian's postgresql package), creates the database, and prints its URL.
# Safe to run again: a server already running on the port is reused.
#   AUTOTUNE_PG_PORT (default 55432), AUTOTUNE_PG_DATA (default /tmp/autotune-pg)
set -euo pipefail
port=${AUTOTUNE_PG_PORT:-55432}
data=${AUTOTUNE_PG_DATA:-/tmp/autotune-pg}
bin=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)
if [ -z "$bin" ]; then
  echo "postgres.sh: PostgreSQL is not installed (apt-get install postgresql)" >&2
  exit 1
fi
as_postgres() { if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi; }
if ! as_postgres "$bin/pg_isready" -q -h 127.0.0.1 -p "$port"; then
  if [ ! -f "$data/PG_VERSION" ]; then
    mkdir -p "$data"
    [ "$(id -u)" = 0 ] && chown postgres "$data"
    as_postgres "$bin/initdb" -D "$data" -A trust -U postgres >/dev/null
  fi
  as_postgres "$bin/pg_ctl" -D "$data" -l "$data/server.log" -w start \
    -o "-p $port -k /tmp -c listen_addresses=127.0.0.1 -c max_connections=300" >/dev/null
fi
if ! as_postgres "$bin/psql" -h 127.0.0.1 -p "$port" -U postgres -Atc \
    "select 1 from pg_database where datname = 'autotune'" | grep -q 1; then
  as_postgres "$bin/createdb" -h 127.0.0.1 -p "$port" -U postgres autotune
fi
echo "postgresql://postgres@127.0.0.1:$port/autotune"
